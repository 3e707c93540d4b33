//! Memory and CPU of the stack's processes, read from `/proc` while a
//! benchmark runs: peak resident set (`VmHWM`, the kernel's own high-water
//! mark, so no peak between two samples is missed), CPU time (`utime +
//! stime`) over the measured window, and the busiest few seconds.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// One read of a process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub rss_kib: u64,
    /// Peak resident set since the process started.
    pub hwm_kib: u64,
    /// User + system CPU time, in seconds.
    pub cpu_s: f64,
}

/// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`; 100 on
/// Linux unless the kernel says otherwise).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

pub fn read(pid: u32, ticks_per_s: f64) -> Result<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("/proc/{pid}/status"))?;
    let kib = |key: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("{key} of /proc/{pid}/status"))
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces and parentheses: fields count from
    // the last ')'. After it: state (field 3) ... utime (14), stime (15).
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc/<pid>/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| -> Result<f64> {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .context("utime/stime of /proc/<pid>/stat")
    };
    Ok(Sample {
        rss_kib: kib("VmRSS:")?,
        hwm_kib: kib("VmHWM:")?,
        cpu_s: (tick(11)? + tick(12)?) / ticks_per_s,
    })
}

/// What was seen of one process over the window.
#[derive(Debug, Clone)]
pub struct Usage {
    pub pid: u32,
    pub first: Sample,
    pub last: Sample,
    pub elapsed: Duration,
    /// Highest CPU use over any [`BUSY_WINDOW`], in cores.
    pub busiest: f64,
    /// The process exited (or could not be read) during the window.
    pub lost: bool,
}

impl Usage {
    pub fn cpu_s(&self) -> f64 {
        self.last.cpu_s - self.first.cpu_s
    }

    /// Mean CPU use over the window, in cores.
    pub fn mean_cores(&self) -> f64 {
        self.cpu_s() / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Length of the window the busiest CPU use is taken over.
pub const BUSY_WINDOW: Duration = Duration::from_secs(5);
const PERIOD: Duration = Duration::from_millis(500);

struct Series {
    pid: u32,
    started: Instant,
    first: Sample,
    last: Sample,
    recent: VecDeque<(Instant, f64)>,
    busiest: f64,
    lost: bool,
}

/// Samples a set of processes every half second until stopped.
pub struct Sampler {
    series: Arc<Mutex<BTreeMap<String, Series>>>,
    /// The whole machine's busiest [`BUSY_WINDOW`], in cores.
    machine_busiest: Arc<Mutex<f64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling `procs` (name, pid); the window starts now.
    pub fn start(procs: &[(String, u32)]) -> Result<Sampler> {
        let ticks = clock_ticks();
        let now = Instant::now();
        let mut series = BTreeMap::new();
        for (name, pid) in procs {
            let s = read(*pid, ticks)?;
            series.insert(
                name.clone(),
                Series {
                    pid: *pid,
                    started: now,
                    first: s,
                    last: s,
                    recent: VecDeque::from([(now, s.cpu_s)]),
                    busiest: 0.0,
                    lost: false,
                },
            );
        }
        let series = Arc::new(Mutex::new(series));
        let shared = series.clone();
        let machine_busiest = Arc::new(Mutex::new(0.0_f64));
        let busiest = machine_busiest.clone();
        let mut machine: VecDeque<(Instant, f64)> = VecDeque::new();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(PERIOD).await;
                let now = Instant::now();
                if let Ok(busy) = machine_busy_s(ticks) {
                    machine.push_back((now, busy));
                    while let Some(&(t, b)) = machine.front() {
                        if now - t <= BUSY_WINDOW {
                            break;
                        }
                        let cores = (busy - b) / (now - t).as_secs_f64();
                        let mut max = busiest.lock().unwrap_or_else(|e| e.into_inner());
                        *max = f64::max(*max, cores);
                        machine.pop_front();
                    }
                }
                let mut all = shared.lock().unwrap_or_else(|e| e.into_inner());
                for s in all.values_mut().filter(|s| !s.lost) {
                    match read(s.pid, ticks) {
                        Ok(sample) => s.observe(now, sample),
                        Err(_) => s.lost = true,
                    }
                }
            }
        });
        Ok(Sampler {
            series,
            machine_busiest,
            task,
        })
    }

    /// Peak RSS so far of one process, in KiB (None: not sampled).
    pub fn peak_kib(&self, name: &str) -> Option<u64> {
        let all = self.series.lock().unwrap_or_else(|e| e.into_inner());
        all.get(name).map(|s| s.last.hwm_kib)
    }

    /// The whole machine's busiest few seconds so far, in cores.
    pub fn machine_busiest(&self) -> f64 {
        *self
            .machine_busiest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the window: a last read of every process, then the usage of each.
    pub fn stop(self) -> BTreeMap<String, Usage> {
        self.task.abort();
        let ticks = clock_ticks();
        let now = Instant::now();
        let mut all = self.series.lock().unwrap_or_else(|e| e.into_inner());
        all.iter_mut()
            .map(|(name, s)| {
                if !s.lost {
                    match read(s.pid, ticks) {
                        Ok(sample) => s.observe(now, sample),
                        Err(_) => s.lost = true,
                    }
                }
                let usage = Usage {
                    pid: s.pid,
                    first: s.first,
                    last: s.last,
                    elapsed: now - s.started,
                    busiest: s.busiest,
                    lost: s.lost,
                };
                (name.clone(), usage)
            })
            .collect()
    }
}

impl Series {
    fn observe(&mut self, now: Instant, sample: Sample) {
        self.last = sample;
        self.recent.push_back((now, sample.cpu_s));
        while let Some(&(t, cpu)) = self.recent.front() {
            if now - t <= BUSY_WINDOW {
                break;
            }
            let span = (now - t).as_secs_f64();
            self.busiest = self.busiest.max((sample.cpu_s - cpu) / span);
            self.recent.pop_front();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The machine's CPU time (`/proc/stat`, every process), to tell how busy
/// the machine was, other jobs included.
pub struct MachineCpu {
    at: Instant,
    busy_s: f64,
}

impl MachineCpu {
    pub fn read() -> Result<MachineCpu> {
        Ok(MachineCpu {
            at: Instant::now(),
            busy_s: machine_busy_s(clock_ticks())?,
        })
    }

    /// Cores busy on average since the read.
    pub fn busy_since(&self) -> Result<f64> {
        let now = machine_busy_s(clock_ticks())?;
        Ok((now - self.busy_s) / self.at.elapsed().as_secs_f64().max(1e-9))
    }
}

/// CPU seconds spent by the whole machine outside idle and iowait.
fn machine_busy_s(ticks_per_s: f64) -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat").context("/proc/stat")?;
    let cpu = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no cpu line in /proc/stat")?;
    let fields: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal, then guest times
    // that user and nice already hold.
    let busy: f64 = fields
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    Ok(busy / ticks_per_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let s = read(std::process::id(), 100.0).unwrap();
        assert!(s.rss_kib > 0 && s.hwm_kib >= s.rss_kib, "{s:?}");
        assert!(machine_busy_s(100.0).unwrap() > 0.0);
    }
}
