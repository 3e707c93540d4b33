use super::*;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 2, 0, 0, 0).unwrap()
}

#[test]
fn a_trace_reads_quantities_and_both_time_forms() {
    let text =
        "# from prometheus\ntime,cpu,memory\n\n2026-11-02T00:00:00Z,12,48Gi\n3600,40500m,160Gi\n";
    let trace = Trace::parse("t", text, t0()).unwrap();
    assert_eq!(
        trace.samples,
        vec![
            Sample {
                at: t0(),
                cpu_millis: 12_000,
                memory_bytes: 48 << 30,
            },
            Sample {
                at: t0() + Duration::hours(1),
                cpu_millis: 40_500,
                memory_bytes: 160 << 30,
            },
        ]
    );
    // A step function: the first sample holds until the second.
    assert_eq!(
        trace.at(t0() + Duration::minutes(59)).unwrap().cpu_millis,
        12_000
    );
    assert_eq!(
        trace.at(t0() + Duration::hours(5)).unwrap().cpu_millis,
        40_500
    );
    assert!(trace.at(t0() - Duration::seconds(1)).is_none());
}

#[test]
fn bad_files_say_which_line_and_what_to_fix() {
    let cases = [
        ("cpu,time,memory\n", 1, "header must be `time,cpu,memory`"),
        ("time,cpu,memory\n0,1\n", 2, "3 fields expected"),
        (
            "time,cpu,memory\nyesterday,1,1Gi\n",
            2,
            "neither RFC 3339 nor seconds",
        ),
        (
            "time,cpu,memory\n0,-1,1Gi\n",
            2,
            "cpu \"-1\" is not a quantity",
        ),
        (
            "time,cpu,memory\n0,1,lots\n",
            2,
            "memory \"lots\" is not a quantity",
        ),
        (
            "time,cpu,memory\n60,1,1Gi\n60,2,1Gi\n",
            3,
            "is not after the previous row",
        ),
        ("# nothing\n", 0, "no `time,cpu,memory` header"),
        ("time,cpu,memory\n", 0, "no samples"),
    ];
    for (text, line, message) in cases {
        let e = Trace::parse("t", text, t0()).unwrap_err();
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.message.contains(message), "{text:?}: {e}");
    }
}

#[test]
fn every_shipped_trace_round_trips_through_its_csv() {
    for shape in Shape::ALL {
        let trace = generate(shape, &Scale::default());
        let again = Trace::parse(shape.name(), &trace.to_csv(), t0()).unwrap();
        assert_eq!(again, trace, "{}", shape.name());
        assert_eq!(trace.start(), t0());
        assert_eq!(
            trace.samples.len(),
            14 * 24 * 12,
            "{}: every 5 minutes for 14 days",
            shape.name()
        );
    }
}

fn cores_at(trace: &Trace, day: i64, hour: i64) -> f64 {
    let s = trace
        .at(t0() + Duration::days(day) + Duration::hours(hour))
        .unwrap();
    s.cpu_millis as f64 / 1000.0
}

#[test]
fn the_shapes_are_what_their_names_say() {
    let scale = Scale::default();
    let (base, peak) = (scale.base_cores, scale.peak_cores);
    let working = generate(Shape::WorkingDays, &scale);
    assert_eq!(cores_at(&working, 0, 9), peak, "Monday 09:00");
    assert_eq!(cores_at(&working, 0, 21), base, "Monday 21:00");
    assert_eq!(cores_at(&working, 5, 12), base, "Saturday noon");
    assert_eq!(cores_at(&working, 7, 8), peak, "the next Monday 08:00");

    let weekly = generate(Shape::Weekly, &scale);
    assert!(
        cores_at(&weekly, 1, 14) > cores_at(&weekly, 1, 3),
        "a daily wave"
    );
    assert!(
        cores_at(&weekly, 1, 14) > cores_at(&weekly, 6, 14),
        "weekends lower"
    );

    let step = generate(Shape::Step, &scale);
    assert_eq!(cores_at(&step, 1, 23), base);
    assert!(
        (2..14).all(|d| cores_at(&step, d, 0) == peak),
        "the step stays"
    );

    let ramp = generate(Shape::Ramp, &scale);
    assert!(
        ramp.samples
            .windows(2)
            .all(|w| w[0].cpu_millis <= w[1].cpu_millis)
    );
    assert_eq!(ramp.samples[0].cpu_millis, (base * 1000.0) as u64);

    let spiky = generate(Shape::Spiky, &scale);
    let at_base = spiky
        .samples
        .iter()
        .filter(|s| s.cpu_millis == (base * 1000.0) as u64)
        .count();
    assert!(
        spiky
            .samples
            .iter()
            .all(|s| s.cpu_millis >= (base * 1000.0) as u64)
    );
    assert!(
        at_base > spiky.samples.len() / 2 && at_base < spiky.samples.len(),
        "mostly the base, with spikes: {at_base} of {}",
        spiky.samples.len()
    );
    // Memory follows the CPU at 4 GiB a core.
    let s = working.samples[100];
    assert_eq!(s.memory_bytes, s.cpu_millis * 4 * 1024 * 1024 * 1024 / 1000);
}

#[test]
fn generation_is_deterministic_and_the_seed_moves_the_spikes() {
    let a = generate(Shape::Spiky, &Scale::default());
    assert_eq!(a, generate(Shape::Spiky, &Scale::default()));
    let other = generate(
        Shape::Spiky,
        &Scale {
            seed: 29,
            ..Scale::default()
        },
    );
    assert_ne!(a, other);
}
