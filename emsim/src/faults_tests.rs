use super::*;
use serde_json::json;

const ZONES: &[&str] = &["fr-par-1", "fr-par-2"];

fn known() -> Vec<String> {
    vec!["GET /x".to_string(), "POST /x".to_string()]
}

fn arm(f: &mut Faults, body: Value) -> Result<Fault, ApiError> {
    f.add(FaultSpec::from_json(body)?, &known(), ZONES)
}

fn order<'a>(name: &'a str, zone: &'a str) -> Order<'a> {
    Order {
        offer_id: "id-of-offer",
        offer_name: name,
        zone,
    }
}

#[test]
fn counted_fault_fires_then_expires() {
    let mut f = Faults::new(0);
    arm(
        &mut f,
        json!({"endpoint": "GET /x", "status": 503, "body": {"message": "boom"}, "count": 2}),
    )
    .unwrap();
    assert!(f.take_http("POST /x").is_none());
    let HttpOutcome::Answer(e) = f.take_http("GET /x").unwrap().outcome else {
        panic!("expected an answer");
    };
    assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(e.body().unwrap()["message"], "boom");
    assert!(f.take_http("GET /x").is_some());
    assert!(f.take_http("GET /x").is_none());
    assert!(f.list().is_empty());
}

#[test]
fn unlimited_fault_holds_until_cleared_and_lists_its_kind() {
    let mut f = Faults::new(0);
    arm(&mut f, json!({"endpoint": "POST /x", "status": 429})).unwrap();
    for _ in 0..5 {
        let action = f.take_http("POST /x").unwrap();
        assert_eq!(action.delay, Duration::ZERO);
        let HttpOutcome::Answer(e) = action.outcome else {
            panic!("expected an answer");
        };
        assert!(e.body().is_none());
    }
    let listed = serde_json::to_value(f.list()).unwrap();
    assert_eq!(
        listed,
        json!([{"kind": "http", "endpoint": "POST /x", "status": 429, "fired": 5}])
    );
    f.clear();
    assert!(f.take_http("POST /x").is_none());
}

#[test]
fn latency_and_timeout() {
    let mut f = Faults::new(0);
    arm(
        &mut f,
        json!({"kind": "http", "endpoint": "GET /x", "latency_ms": 250, "count": 1}),
    )
    .unwrap();
    arm(
        &mut f,
        json!({"endpoint": "POST /x", "timeout": true, "count": 1}),
    )
    .unwrap();
    assert_eq!(
        f.take_http("GET /x").unwrap(),
        HttpAction {
            delay: Duration::from_millis(250),
            outcome: HttpOutcome::PassThrough
        }
    );
    assert_eq!(f.take_http("POST /x").unwrap().outcome, HttpOutcome::Hold);
    assert!(f.list().is_empty());
    arm(
        &mut f,
        json!({"endpoint": "POST /x", "lose_answer": true, "count": 1}),
    )
    .unwrap();
    assert_eq!(
        f.take_http("POST /x").unwrap().outcome,
        HttpOutcome::LoseAnswer
    );
    assert!(f.take_http("POST /x").is_none());
}

#[test]
fn rate_draws_replay_with_the_seed() {
    let pattern = |seed| {
        let mut f = Faults::new(seed);
        arm(
            &mut f,
            json!({"endpoint": "GET /x", "status": 500, "rate": 0.5}),
        )
        .unwrap();
        (0..64)
            .map(|_| f.take_http("GET /x").is_some())
            .collect::<Vec<_>>()
    };
    let a = pattern(7);
    assert_eq!(a, pattern(7), "same seed, same calls: same failures");
    let fired = a.iter().filter(|x| **x).count();
    assert!((10..=54).contains(&fired), "rate 0.5 fired {fired}/64");
    assert_ne!(a, pattern(8));

    let mut f = Faults::new(7);
    arm(
        &mut f,
        json!({"endpoint": "GET /x", "status": 500, "rate": 0.5}),
    )
    .unwrap();
    let first: Vec<bool> = (0..8).map(|_| f.take_http("GET /x").is_some()).collect();
    f.reset();
    arm(
        &mut f,
        json!({"endpoint": "GET /x", "status": 500, "rate": 0.5}),
    )
    .unwrap();
    let again: Vec<bool> = (0..8).map(|_| f.take_http("GET /x").is_some()).collect();
    assert_eq!(first, again, "reset re-seeds");

    let mut f = Faults::new(0);
    arm(
        &mut f,
        json!({"endpoint": "GET /x", "status": 500, "rate": 0.0}),
    )
    .unwrap();
    assert!((0..32).all(|_| f.take_http("GET /x").is_none()));
}

#[test]
fn order_faults_match_offer_and_zone_and_expire() {
    let mut f = Faults::new(0);
    arm(
        &mut f,
        json!({"kind": "out_of_stock_after_order", "offer": "em-a115x-ssd", "zone": "fr-par-2", "count": 1}),
    )
    .unwrap();
    arm(
        &mut f,
        json!({"kind": "delivery_seconds", "seconds": 600.0}),
    )
    .unwrap();
    arm(
        &mut f,
        json!({"kind": "stuck_delivery", "offer": "EM-B112X-SSD"}),
    )
    .unwrap();

    let other_zone = f.take_order(order("EM-A115X-SSD", "fr-par-1"));
    assert_eq!(
        other_zone,
        OrderEffects {
            delivery_seconds: Some(600.0),
            ..Default::default()
        }
    );
    let hit = f.take_order(order("EM-A115X-SSD", "fr-par-2"));
    assert!(hit.out_of_stock && !hit.stuck);
    let spent = f.take_order(order("EM-A115X-SSD", "fr-par-2"));
    assert!(!spent.out_of_stock, "count 1 is spent");
    let stuck = f.take_order(order("EM-B112X-SSD", "fr-par-2"));
    assert!(stuck.stuck);
    let by_id = f.take_order(Order {
        offer_id: "x",
        offer_name: "EM-I215E-NVME",
        zone: "fr-par-1",
    });
    assert!(!by_id.stuck);

    let listed = serde_json::to_value(f.list()).unwrap();
    assert_eq!(listed[0]["kind"], "delivery_seconds");
    assert_eq!(listed[0]["fired"], 5);
    assert_eq!(listed[1]["kind"], "stuck_delivery");
    assert_eq!(listed[1]["fired"], 1);
}

#[test]
fn rejects_bad_faults() {
    let mut f = Faults::new(0);
    for body in [
        json!({"endpoint": "GET /nope", "status": 500}),
        json!({"endpoint": "GET /x", "status": 42}),
        json!({"endpoint": "GET /x", "status": 1000}),
        json!({"endpoint": "GET /x"}),
        json!({"endpoint": "GET /x", "status": 500, "rate": 1.5}),
        json!({"endpoint": "GET /x", "status": 500, "count": 0}),
        json!({"endpoint": "GET /x", "timeout": true, "status": 500}),
        json!({"endpoint": "GET /x", "lose_answer": true, "status": 500}),
        json!({"endpoint": "GET /x", "lose_answer": true, "timeout": true}),
        json!({"endpoint": "GET /x", "status": 500, "typo": 1}),
        json!({"kind": "stuck_delivery", "zone": "mars-1"}),
        json!({"kind": "delivery_seconds", "seconds": -1.0}),
        json!({"kind": "delivery_seconds"}),
        json!({"kind": "earthquake"}),
        json!([1]),
        // List faults: list endpoints only, sensible numbers.
        json!({"kind": "list_missing_page", "endpoint": "POST /x"}),
        json!({"kind": "list_missing_page", "endpoint": "GET /x/{id}"}),
        json!({"kind": "list_missing_page", "endpoint": "GET /nope"}),
        json!({"kind": "list_missing_page", "endpoint": "GET /x", "page": 0}),
        json!({"kind": "list_missing_page", "endpoint": "GET /x", "drop": 0}),
        json!({"kind": "list_missing_page", "endpoint": "GET /x", "rate": -0.1}),
        json!({"kind": "list_missing_page", "endpoint": "GET /x", "status": 200}),
        json!({"kind": "list_total_count", "endpoint": "GET /x", "delta": 0}),
        json!({"kind": "list_total_count", "endpoint": "GET /x"}),
    ] {
        assert!(arm(&mut f, body.clone()).is_err(), "accepted {body}");
    }
    assert!(f.list().is_empty());
}

fn list_known() -> Vec<String> {
    vec!["GET /x".into(), "GET /x/{id}".into(), "POST /x".into()]
}

fn arm_list(f: &mut Faults, body: Value) {
    f.add(FaultSpec::from_json(body).unwrap(), &list_known(), ZONES)
        .unwrap();
}

#[test]
fn missing_page_matches_its_page_and_drops_items() {
    let mut f = Faults::new(0);
    arm_list(
        &mut f,
        json!({"kind": "list_missing_page", "endpoint": "GET /x", "page": 2, "count": 1}),
    );
    assert!(f.has_list("GET /x") && !f.has_list("GET /x/{id}"));
    assert_eq!(f.take_list("GET /x", 1), None, "page 1 is intact");
    assert_eq!(f.take_list("GET /y", 2), None);
    let effects = f.take_list("GET /x", 2).expect("page 2 loses its items");
    let mut body = json!({"total_count": 5, "servers": [1, 2]});
    effects.apply(&mut body);
    assert_eq!(body, json!({"total_count": 5, "servers": []}));
    assert!(f.list().is_empty(), "count 1 is spent");
    assert!(!f.has_list("GET /x"));

    // `drop` removes the last items of every page; the count stays true.
    arm_list(
        &mut f,
        json!({"kind": "list_missing_page", "endpoint": "GET /x", "drop": 1}),
    );
    for page in [1, 3] {
        let mut body = json!({"total_count": 3, "offers": ["a", "b", "c"]});
        f.take_list("GET /x", page).unwrap().apply(&mut body);
        assert_eq!(body, json!({"total_count": 3, "offers": ["a", "b"]}));
    }
    assert_eq!(f.list()[0].fired, 2);
}

#[test]
fn total_count_moves_and_combines_with_a_missing_page() {
    let mut f = Faults::new(0);
    arm_list(
        &mut f,
        json!({"kind": "list_total_count", "endpoint": "GET /x", "delta": -5}),
    );
    let mut body = json!({"total_count": 2, "servers": [1, 2]});
    f.take_list("GET /x", 1).unwrap().apply(&mut body);
    assert_eq!(
        body,
        json!({"total_count": 0, "servers": [1, 2]}),
        "floored at 0"
    );

    // Both kinds act on one answer: a consistent-looking shorter list.
    f.clear();
    arm_list(
        &mut f,
        json!({"kind": "list_total_count", "endpoint": "GET /x", "delta": -1}),
    );
    arm_list(
        &mut f,
        json!({"kind": "list_missing_page", "endpoint": "GET /x", "drop": 1}),
    );
    let mut body = json!({"total_count": 3, "servers": [1, 2, 3]});
    let effects = f.take_list("GET /x", 1).unwrap();
    assert_eq!(
        effects,
        ListEffects {
            drop: 1,
            total_delta: -1
        }
    );
    effects.apply(&mut body);
    assert_eq!(body, json!({"total_count": 2, "servers": [1, 2]}));
    let listed = serde_json::to_value(f.list()).unwrap();
    assert_eq!(
        listed,
        json!([
            {"kind": "list_total_count", "endpoint": "GET /x", "delta": -1, "fired": 1},
            {"kind": "list_missing_page", "endpoint": "GET /x", "drop": 1, "fired": 1},
        ])
    );
}

#[test]
fn list_faults_leave_other_shapes_alone_and_skip_http_ones() {
    let mut f = Faults::new(0);
    arm_list(
        &mut f,
        json!({"kind": "list_missing_page", "endpoint": "GET /x"}),
    );
    assert!(f.take_http("GET /x").is_none(), "not an http fault");
    let effects = f.take_list("GET /x", 1).unwrap();
    let mut odd = json!("not an object");
    effects.apply(&mut odd);
    assert_eq!(odd, json!("not an object"));
    let mut no_items = json!({"total_count": 1});
    effects.apply(&mut no_items);
    assert_eq!(no_items, json!({"total_count": 1}));

    let mut f = Faults::new(3);
    arm_list(
        &mut f,
        json!({"kind": "list_total_count", "endpoint": "GET /x", "delta": 1, "rate": 0.0}),
    );
    assert!((0..16).all(|_| f.take_list("GET /x", 1).is_none()));
}

/// An "empty 200" is an http fault: status 200 without a body, or with
/// `{}`; both are refused by nothing else.
#[test]
fn empty_200_is_an_http_fault() {
    let mut f = Faults::new(0);
    arm(&mut f, json!({"endpoint": "GET /x", "status": 200})).unwrap();
    let HttpOutcome::Answer(e) = f.take_http("GET /x").unwrap().outcome else {
        panic!("expected an answer");
    };
    assert_eq!(e.status(), StatusCode::OK);
    assert!(e.body().is_none());
    f.clear();
    arm(
        &mut f,
        json!({"endpoint": "GET /x", "status": 200, "body": {}}),
    )
    .unwrap();
    let HttpOutcome::Answer(e) = f.take_http("GET /x").unwrap().outcome else {
        panic!("expected an answer");
    };
    assert_eq!(e.body(), Some(json!({})));
}
