//! Karpenter core's own end-to-end suites (`test/suites/*` of the
//! `sigs.k8s.io/karpenter` module at the bridge's version) against this
//! provider: the pieces `kps-conformance` (`just conformance`) is made of.
//! The suites are run as they are published, never copied or patched; this
//! module fills in our default NodeClass and NodePool files, names the specs
//! that cannot apply to Scaleway (with the reason), and reads Ginkgo's JSON
//! report into the table of docs/conformance.md.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail, ensure};
use serde::Deserialize;

/// A suite of core's `test/suites`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Suite {
    Regression,
    Disruption,
    Performance,
}

impl Suite {
    pub const ALL: [Suite; 3] = [Suite::Regression, Suite::Disruption, Suite::Performance];

    pub fn name(self) -> &'static str {
        match self {
            Suite::Regression => "regression",
            Suite::Disruption => "disruption",
            Suite::Performance => "performance",
        }
    }

    pub fn parse(s: &str) -> Result<Suite> {
        Suite::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .with_context(|| format!("unknown suite {s:?} (regression, disruption, performance)"))
    }
}

/// The NodeClass kind the suites run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `ScalewayElasticMetalNodeClass`.
    Metal,
    /// `ScalewayInstanceNodeClass`.
    Instance,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::Metal, Kind::Instance];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Metal => "metal",
            Kind::Instance => "instance",
        }
    }

    pub fn parse(s: &str) -> Result<Kind> {
        Kind::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .with_context(|| format!("unknown NodeClass kind {s:?} (metal, instance)"))
    }

    /// The committed default NodeClass file (under `e2e/conformance/`).
    pub fn nodeclass_file(self) -> &'static str {
        match self {
            Kind::Metal => "metal-nodeclass.yaml",
            Kind::Instance => "instance-nodeclass.yaml",
        }
    }

    /// `kind:` of that NodeClass.
    pub fn nodeclass_kind(self) -> &'static str {
        match self {
            Kind::Metal => "ScalewayElasticMetalNodeClass",
            Kind::Instance => "ScalewayInstanceNodeClass",
        }
    }
}

/// Replaces every `${NAME}` of `template` by `vars[NAME]`; a name without a
/// value is an error (core would read a NodeClass with a literal `${...}`).
pub fn fill(template: &str, vars: &BTreeMap<&str, String>) -> Result<String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .with_context(|| format!("unclosed ${{ in {:?}", &rest[start..]))?;
        let name = &after[..end];
        let value = vars
            .get(name)
            .with_context(|| format!("no value for ${{{name}}}"))?;
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A spec skipped on this provider, and why (`e2e/conformance/skips.yaml`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Skip {
    pub suite: String,
    /// The spec's full text as Ginkgo matches it: the container texts and
    /// the leaf text, joined by spaces.
    pub spec: String,
    /// The kinds it is skipped on (every kind when absent).
    #[serde(default)]
    pub kinds: Vec<String>,
    pub reason: String,
}

impl Skip {
    fn applies(&self, suite: Suite, kind: Kind) -> bool {
        self.suite == suite.name()
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| k == kind.name()))
    }
}

pub fn load_skips(path: &Path) -> Result<Vec<Skip>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let skips: Vec<Skip> =
        serde_yaml_ng::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    for s in &skips {
        Suite::parse(&s.suite)?;
        for k in &s.kinds {
            Kind::parse(k)?;
        }
        ensure!(
            !s.reason.trim().is_empty(),
            "skip of {:?} gives no reason",
            s.spec
        );
    }
    Ok(skips)
}

/// The skips of `suite` on `kind`.
pub fn skips_for(skips: &[Skip], suite: Suite, kind: Kind) -> Vec<Skip> {
    skips
        .iter()
        .filter(|s| s.applies(suite, kind))
        .cloned()
        .collect()
}

/// A group of specs run with a default NodePool of its own
/// (`e2e/conformance/nodepools.yaml`): core pins some specs to instance types
/// on its KWOK provider only, and the same pin on ours is a NodePool, passed
/// with `--default-nodepool`, not an edit of the spec.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct PoolPin {
    pub suite: String,
    /// The kinds it applies to (every kind when absent).
    #[serde(default)]
    pub kinds: Vec<String>,
    /// The specs whose full text starts with this (a container's text and a
    /// space, e.g. `"CapacityBuffer "`).
    pub prefix: String,
    /// A file of `e2e/conformance/`.
    pub nodepool: String,
    pub reason: String,
}

impl PoolPin {
    fn applies(&self, suite: Suite, kind: Kind) -> bool {
        self.suite == suite.name()
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| k == kind.name()))
    }
}

pub fn load_pins(path: &Path) -> Result<Vec<PoolPin>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let pins: Vec<PoolPin> =
        serde_yaml_ng::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    for p in &pins {
        Suite::parse(&p.suite)?;
        for k in &p.kinds {
            Kind::parse(k)?;
        }
        ensure!(
            !p.reason.trim().is_empty(),
            "the NodePool of {:?} gives no reason",
            p.prefix
        );
        ensure!(
            !p.prefix.is_empty() && !p.nodepool.contains('/'),
            "{:?}: a prefix and a file name of e2e/conformance/ are needed",
            p.prefix
        );
    }
    Ok(pins)
}

/// The pins of `suite` on `kind`.
pub fn pins_for(pins: &[PoolPin], suite: Suite, kind: Kind) -> Vec<PoolPin> {
    pins.iter()
        .filter(|p| p.applies(suite, kind))
        .cloned()
        .collect()
}

/// `specs` grouped by the default NodePool they run with: `default` for the
/// specs no pin names (first), then each pin's file (the first pin whose
/// prefix matches wins). Groups without a spec are left out; order within a
/// group is kept.
pub fn group_by_nodepool(
    specs: &[String],
    pins: &[PoolPin],
    default: &str,
) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = vec![(default.to_string(), Vec::new())];
    for spec in specs {
        let file = pins
            .iter()
            .find(|p| spec.starts_with(&p.prefix))
            .map_or(default, |p| p.nodepool.as_str());
        match groups.iter_mut().find(|(f, _)| f == file) {
            Some((_, g)) => g.push(spec.clone()),
            None => groups.push((file.to_string(), vec![spec.clone()])),
        }
    }
    groups.retain(|(_, g)| !g.is_empty());
    groups
}

/// Fails unless every pin names specs the suite has (as for skips).
pub fn check_pins_match(pins: &[PoolPin], specs: &[String]) -> Result<()> {
    for p in pins {
        ensure!(
            specs.iter().any(|s| s.starts_with(&p.prefix)),
            "e2e/conformance/nodepools.yaml pins {:?}, which names no spec of this suite",
            p.prefix
        );
    }
    Ok(())
}

/// A Go regular expression matching exactly these specs (for
/// `--ginkgo.skip` and `--ginkgo.focus`); `None` when there are none. Ginkgo
/// matches against the suite's description, a space and the spec's full
/// text; descriptions (`Regression`, `Disruption`, `Performance`) have no
/// space.
pub fn exact_regex<'a>(specs: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let alternatives: Vec<String> = specs.into_iter().map(go_regex_escape).collect();
    if alternatives.is_empty() {
        return None;
    }
    Some(format!("^[^ ]+ (?:{})$", alternatives.join("|")))
}

/// [`exact_regex`] of the skips' specs.
pub fn skip_regex(skips: &[Skip]) -> Option<String> {
    exact_regex(skips.iter().map(|s| s.spec.as_str()))
}

/// Splits `specs` into `n` shards of about equal expected duration (longest
/// first, each to the shard with the least so far; `durations` in seconds
/// from an earlier run, `default` for a spec not in it). Deterministic: the
/// same inputs give the same shards on every machine.
pub fn shards(
    specs: &[String],
    durations: &BTreeMap<String, f64>,
    default: f64,
    n: usize,
) -> Vec<Vec<String>> {
    let n = n.max(1);
    let mut weighted: Vec<(f64, &String)> = specs
        .iter()
        .map(|s| (durations.get(s).copied().unwrap_or(default), s))
        .collect();
    weighted.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let mut out: Vec<(f64, Vec<String>)> = vec![(0.0, Vec::new()); n];
    for (d, spec) in weighted {
        let (i, _) = out
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.0.total_cmp(&b.1.0).then(a.0.cmp(&b.0)))
            .expect("n >= 1");
        out[i].0 += d;
        out[i].1.push(spec.clone());
    }
    out.into_iter().map(|(_, s)| s).collect()
}

/// Escapes the metacharacters of Go's `regexp` syntax (what
/// `regexp.QuoteMeta` escapes).
pub fn go_regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// What became of one spec.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecResult {
    /// Containers and leaf, joined by " › " for reading.
    pub name: String,
    /// The full text Ginkgo matches (joined by spaces).
    pub full_text: String,
    /// Ginkgo's state: passed, failed, skipped, panicked, timedout, ...
    pub state: String,
    pub seconds: f64,
    /// The skip reason or the failure message (first line).
    pub note: String,
}

impl SpecResult {
    pub fn passed(&self) -> bool {
        self.state == "passed"
    }

    pub fn skipped(&self) -> bool {
        self.state == "skipped" || self.state == "pending"
    }

    pub fn failed(&self) -> bool {
        !self.passed() && !self.skipped()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GinkgoReport {
    #[serde(default)]
    spec_reports: Option<Vec<GinkgoSpec>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GinkgoSpec {
    #[serde(default)]
    container_hierarchy_texts: Option<Vec<String>>,
    leaf_node_type: String,
    #[serde(default)]
    leaf_node_text: Option<String>,
    state: String,
    /// Nanoseconds (Go's `time.Duration`).
    #[serde(default)]
    run_time: i64,
    #[serde(default)]
    failure: Option<GinkgoFailure>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GinkgoFailure {
    #[serde(default)]
    message: String,
}

/// Reads Ginkgo's `--json-report`: one result per `It` (table entries
/// included), in run order. Setup nodes that failed (a `BeforeSuite`) are
/// reported as results of their own, so that they cannot go unseen.
pub fn parse_report(json: &str, skips: &[Skip]) -> Result<Vec<SpecResult>> {
    let reports: Vec<GinkgoReport> =
        serde_json::from_str(json).context("parsing Ginkgo's JSON report")?;
    ensure!(!reports.is_empty(), "Ginkgo's JSON report holds no suite");
    let mut out = Vec::new();
    for r in reports {
        for s in r.spec_reports.into_iter().flatten() {
            let is_spec = s.leaf_node_type == "It";
            if !is_spec && s.state == "passed" {
                continue;
            }
            let mut texts = s.container_hierarchy_texts.clone().unwrap_or_default();
            let leaf = match s.leaf_node_text.as_deref() {
                None | Some("") => s.leaf_node_type.clone(),
                Some(text) => text.to_string(),
            };
            texts.push(leaf);
            let full_text = texts.join(" ");
            let message = s
                .failure
                .map(|f| f.message)
                .unwrap_or_default()
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or_default()
                .to_string();
            let note = if s.state == "skipped" && message.is_empty() {
                skips
                    .iter()
                    .find(|k| k.spec == full_text)
                    .map(|k| k.reason.clone())
                    .unwrap_or_default()
            } else {
                message
            };
            out.push(SpecResult {
                name: texts.join(" › "),
                full_text,
                state: s.state,
                seconds: s.run_time as f64 / 1e9,
                note,
            });
        }
    }
    Ok(out)
}

/// Counts (passed, failed, skipped).
pub fn counts(results: &[SpecResult]) -> (usize, usize, usize) {
    let passed = results.iter().filter(|r| r.passed()).count();
    let failed = results.iter().filter(|r| r.failed()).count();
    let skipped = results.iter().filter(|r| r.skipped()).count();
    (passed, failed, skipped)
}

/// The rows of docs/conformance.md's table for one run.
pub fn markdown_table(results: &[SpecResult]) -> String {
    let mut out = String::from("| spec | result | duration | note |\n|---|---|---|---|\n");
    for r in results {
        let note = r.note.replace('|', "\\|");
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r.name.replace('|', "\\|"),
            r.state,
            duration(r.seconds),
            note
        ));
    }
    out
}

fn duration(seconds: f64) -> String {
    if seconds < 60.0 {
        format!("{seconds:.1} s")
    } else {
        format!("{:.1} min", seconds / 60.0)
    }
}

/// Picks from Ginkgo's verbose output what a person watching a run needs:
/// the number of specs, each spec's outcome (`• [12.3 seconds]`,
/// `• [FAILED] [900.1 seconds]`, `S [SKIPPED] ...`) with the name of the
/// spec it ends (printed after a separator when the spec started), failure
/// summaries and the final tally.
#[derive(Debug, Default)]
pub struct Progress {
    after_separator: bool,
    /// The name of the spec running.
    current: Option<String>,
}

impl Progress {
    pub fn line(&mut self, line: &str) -> Option<String> {
        let trimmed = line.trim_end();
        let after_separator = std::mem::take(&mut self.after_separator);
        if trimmed.starts_with("------------------------------") {
            self.after_separator = true;
            return None;
        }
        let is_outcome =
            trimmed.starts_with("• [") || trimmed.starts_with("S [") || trimmed.starts_with("P [");
        if is_outcome {
            let name = self.current.take().unwrap_or_default();
            return Some(format!("{trimmed} {name}").trim_end().to_string());
        }
        let setup = trimmed.starts_with('[') || trimmed.starts_with("SS") || trimmed.is_empty();
        if after_separator && !setup {
            self.current = Some(trimmed.to_string());
            return None;
        }
        let summary = trimmed.starts_with("Will run ")
            || trimmed.starts_with("Ran ")
            || trimmed.starts_with("SUCCESS!")
            || trimmed.starts_with("FAIL!")
            || trimmed.starts_with("  [FAIL]")
            || trimmed.starts_with("[FAIL]")
            || trimmed.contains("[BeforeSuite] [FAILED]")
            || trimmed.contains("[AfterSuite] [FAILED]");
        summary.then(|| trimmed.to_string())
    }
}

/// Fails unless every skip names a spec the suite has: a renamed spec in a
/// newer core must not leave a stale skip that silently skips nothing.
pub fn check_skips_exist(skips: &[Skip], results: &[SpecResult]) -> Result<()> {
    for s in skips {
        if !results.iter().any(|r| r.full_text == s.spec) {
            bail!(
                "e2e/conformance/skips.yaml names {:?}, which this suite does not have",
                s.spec
            );
        }
    }
    Ok(())
}

/// The hourly Elastic Metal ranges whose quota a run of core's suites
/// raises (the CPU ranges of the emsim catalog's zone), as a customer asks
/// Scaleway to: a new project may order 10 servers of a range, and the
/// suites want about 100 nodes at once.
pub const QUOTA_RAISED_OFFERS: [&str; 5] = [
    "EM-A115X-SSD",
    "EM-A315X-SSD",
    "EM-B112X-SSD",
    "EM-I215E-NVME",
    "EM-L105X-SATA",
];

/// Raises [`QUOTA_RAISED_OFFERS`] to `quota` in the stack's emsim.
pub async fn raise_quotas(stack: &crate::stack::Stack, quota: u64) -> Result<()> {
    for offer in QUOTA_RAISED_OFFERS {
        stack.emsim.set_quota(offer, Some(quota)).await?;
    }
    Ok(())
}

/// Writes our default NodeClass of `kind` (`e2e/conformance/<kind>-nodeclass.yaml`)
/// filled in from the stack to `path`.
pub fn write_default_nodeclass(stack: &crate::stack::Stack, kind: Kind, path: &Path) -> Result<()> {
    use crate::stack;
    let vars = BTreeMap::from([
        ("ZONE", stack::ZONE.to_string()),
        ("IMAGE_URL_TEMPLATE", stack.image.url_template()),
        ("TALOS_VERSION", stack.opts.talos_version.clone()),
        ("TALOS_SCHEMATIC", stack::TALOS_SCHEMATIC.to_string()),
        ("RESCUE_SSH_KEY_ID", stack.ssh_key_id.clone()),
        ("NAMESPACE", stack::NAMESPACE.to_string()),
    ]);
    let dir = stack::repo_root().join("e2e/conformance");
    let template = std::fs::read_to_string(dir.join(kind.nodeclass_file()))?;
    std::fs::write(path, fill(&template, &vars)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(prefix: &str, file: &str) -> PoolPin {
        PoolPin {
            suite: "regression".into(),
            kinds: vec!["instance".into()],
            prefix: prefix.into(),
            nodepool: file.into(),
            reason: "r".into(),
        }
    }

    #[test]
    fn specs_are_grouped_by_their_pinned_nodepool_default_first() {
        let specs: Vec<String> = [
            "CapacityBuffer Lifecycle a",
            "Integration b",
            "CapacityBuffer Edge c",
            "Chaos d",
        ]
        .map(String::from)
        .to_vec();
        let pins = [
            pin("CapacityBuffer ", "np-2.yaml"),
            pin("Chaos ", "np-c.yaml"),
        ];
        let groups = group_by_nodepool(&specs, &pins, "nodepool.yaml");
        assert_eq!(
            groups,
            vec![
                (
                    "nodepool.yaml".to_string(),
                    vec!["Integration b".to_string()]
                ),
                (
                    "np-2.yaml".to_string(),
                    vec![
                        "CapacityBuffer Lifecycle a".to_string(),
                        "CapacityBuffer Edge c".to_string()
                    ]
                ),
                ("np-c.yaml".to_string(), vec!["Chaos d".to_string()]),
            ]
        );
        // No pinned spec selected: one group; nothing selected: none.
        assert_eq!(
            group_by_nodepool(&specs[1..2], &pins, "nodepool.yaml").len(),
            1
        );
        assert!(group_by_nodepool(&[], &pins, "nodepool.yaml").is_empty());
        // A pin must name specs the suite has.
        assert!(check_pins_match(&pins, &specs).is_ok());
        assert!(check_pins_match(&[pin("Gone ", "x.yaml")], &specs).is_err());
    }

    #[test]
    fn the_committed_pins_parse_and_name_their_files() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance");
        let pins = load_pins(&dir.join("nodepools.yaml")).unwrap();
        assert!(!pins.is_empty());
        for p in &pins {
            assert!(dir.join(&p.nodepool).is_file(), "{} missing", p.nodepool);
        }
    }

    #[test]
    fn fill_replaces_every_variable_and_refuses_an_unknown_one() {
        let vars = BTreeMap::from([("ZONE", "fr-par-2".to_string()), ("V", "x".to_string())]);
        assert_eq!(
            fill("zones: [${ZONE}] ${V}${V}", &vars).unwrap(),
            "zones: [fr-par-2] xx"
        );
        let err = fill("a ${NOPE} b", &vars).unwrap_err().to_string();
        assert!(err.contains("NOPE"), "{err}");
        assert!(fill("a ${ZONE", &vars).is_err());
    }

    #[test]
    fn the_committed_templates_fill_with_the_runner_variables() {
        let dir = crate::stack::repo_root().join("e2e/conformance");
        let vars = BTreeMap::from([
            ("ZONE", "z".to_string()),
            ("IMAGE_URL_TEMPLATE", "u".to_string()),
            ("TALOS_VERSION", "v1.13.9".to_string()),
            ("TALOS_SCHEMATIC", "s".to_string()),
            ("RESCUE_SSH_KEY_ID", "k".to_string()),
            ("NAMESPACE", "n".to_string()),
        ]);
        for kind in Kind::ALL {
            let text = std::fs::read_to_string(dir.join(kind.nodeclass_file())).unwrap();
            let filled = fill(&text, &vars).unwrap();
            let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&filled).unwrap();
            assert_eq!(v["kind"].as_str(), Some(kind.nodeclass_kind()));
        }
        let pool = std::fs::read_to_string(dir.join("nodepool.yaml")).unwrap();
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&pool).unwrap();
        assert_eq!(v["kind"].as_str(), Some("NodePool"));
        let skips = load_skips(&dir.join("skips.yaml")).unwrap();
        assert!(!skips.is_empty());
    }

    #[test]
    fn the_skip_regex_matches_exactly_the_named_specs() {
        let skips = vec![Skip {
            suite: "regression".into(),
            spec: "Drift NodePool Drift NodeRequirements (spot)".into(),
            kinds: vec![],
            reason: "r".into(),
        }];
        let re = skip_regex(&skips).unwrap();
        assert_eq!(
            re,
            r"^[^ ]+ (?:Drift NodePool Drift NodeRequirements \(spot\))$"
        );
        assert_eq!(skip_regex(&[]), None);
        assert_eq!(
            exact_regex(["a b", "c"]).as_deref(),
            Some("^[^ ]+ (?:a b|c)$")
        );
        assert_eq!(go_regex_escape("a.b*c[d]"), r"a\.b\*c\[d\]");
    }

    #[test]
    fn shards_balance_expected_durations_and_cover_every_spec_once() {
        let specs: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        let durations = BTreeMap::from([
            ("a".to_string(), 600.0),
            ("b".to_string(), 300.0),
            ("c".to_string(), 300.0),
            ("d".to_string(), 100.0),
        ]);
        let got = shards(&specs, &durations, 50.0, 2);
        // a (600) | b (300) + c (300) | the tie goes to the first: d | e.
        assert_eq!(
            got,
            vec![
                vec!["a".to_string(), "d".into()],
                vec!["b".into(), "c".into(), "e".into()]
            ]
        );
        let one = shards(&specs, &durations, 50.0, 1);
        assert_eq!(one[0].len(), 5);
        let many = shards(&specs, &durations, 50.0, 8);
        assert_eq!(many.len(), 8);
        let mut all: Vec<String> = many.concat();
        all.sort();
        assert_eq!(all, specs);
    }

    #[test]
    fn skips_apply_per_suite_and_kind() {
        let s = |suite: &str, kinds: &[&str]| Skip {
            suite: suite.into(),
            spec: "x".into(),
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
            reason: "r".into(),
        };
        let all = vec![
            s("regression", &[]),
            s("regression", &["instance"]),
            s("disruption", &[]),
        ];
        assert_eq!(skips_for(&all, Suite::Regression, Kind::Metal).len(), 1);
        assert_eq!(skips_for(&all, Suite::Regression, Kind::Instance).len(), 2);
        assert_eq!(skips_for(&all, Suite::Disruption, Kind::Metal).len(), 1);
    }

    const REPORT: &str = r#"[{"SuiteDescription":"Regression","SpecReports":[
      {"LeafNodeType":"BeforeSuite","LeafNodeText":"","State":"passed","RunTime":5},
      {"ContainerHierarchyTexts":["Chaos","Runaway Scale-Up"],"LeafNodeType":"It",
       "LeafNodeText":"should not scale up with spot","State":"skipped","RunTime":0},
      {"ContainerHierarchyTexts":["Integration"],"LeafNodeType":"It",
       "LeafNodeText":"should pass","State":"passed","RunTime":90500000000},
      {"ContainerHierarchyTexts":["Reboot"],"LeafNodeType":"It","LeafNodeText":"needs a flag",
       "State":"skipped","RunTime":1000000,"Failure":{"Message":"reboot specs require --reboot-condition"}},
      {"ContainerHierarchyTexts":["NodeClaim"],"LeafNodeType":"It","LeafNodeText":"fails",
       "State":"failed","RunTime":2000000000,"Failure":{"Message":"\n  Timed out after 900s.\nmore"}},
      {"ContainerHierarchyTexts":null,"LeafNodeType":"AfterSuite","LeafNodeText":"","State":"failed","Failure":{"Message":"cleanup failed"}}
    ]}]"#;

    #[test]
    fn the_report_gives_one_row_per_spec_with_reasons_and_failed_setup_nodes() {
        let skips = vec![Skip {
            suite: "regression".into(),
            spec: "Chaos Runaway Scale-Up should not scale up with spot".into(),
            kinds: vec![],
            reason: "no spot on Scaleway".into(),
        }];
        let results = parse_report(REPORT, &skips).unwrap();
        let rows: Vec<_> = results
            .iter()
            .map(|r| (r.name.as_str(), r.state.as_str(), r.note.as_str()))
            .collect();
        assert_eq!(
            rows,
            vec![
                (
                    "Chaos › Runaway Scale-Up › should not scale up with spot",
                    "skipped",
                    "no spot on Scaleway"
                ),
                ("Integration › should pass", "passed", ""),
                (
                    "Reboot › needs a flag",
                    "skipped",
                    "reboot specs require --reboot-condition"
                ),
                ("NodeClaim › fails", "failed", "Timed out after 900s."),
                ("AfterSuite", "failed", "cleanup failed"),
            ]
        );
        assert_eq!(counts(&results), (1, 2, 2));
        assert!((results[1].seconds - 90.5).abs() < 1e-9);
        check_skips_exist(&skips, &results).unwrap();
        let stale = vec![Skip {
            spec: "gone".into(),
            ..skips[0].clone()
        }];
        assert!(check_skips_exist(&stale, &results).is_err());
        let table = markdown_table(&results);
        assert!(
            table.contains("| Integration › should pass | passed | 1.5 min |  |"),
            "{table}"
        );
    }

    #[test]
    fn progress_joins_each_outcome_with_its_spec_name() {
        let output = "Will run 3 of 75 specs
------------------------------
[BeforeSuite] 
/x/suite_test.go:48
[BeforeSuite] PASSED [0.116 seconds]
------------------------------
SSSSSSSS
------------------------------
Integration DaemonSet should pass
/path/file.go:12
    logger.go: chatter
[CREATED/UPDATED] NODE x
• [117.764 seconds]
------------------------------
NodeClaim should fail
/path/file.go:99
• [FAILED] [900.1 seconds]
NodeClaim should fail
/path/file.go:99

  [FAILED] Timed out
------------------------------
Summarizing 1 Failure:
  [FAIL] NodeClaim should fail
Ran 2 of 75 Specs in 1017 seconds
FAIL! -- 1 Passed | 1 Failed
";
        let mut p = Progress::default();
        let shown: Vec<String> = output.lines().filter_map(|l| p.line(l)).collect();
        assert_eq!(
            shown,
            vec![
                "Will run 3 of 75 specs",
                "• [117.764 seconds] Integration DaemonSet should pass",
                "• [FAILED] [900.1 seconds] NodeClaim should fail",
                "  [FAIL] NodeClaim should fail",
                "Ran 2 of 75 Specs in 1017 seconds",
                "FAIL! -- 1 Passed | 1 Failed",
            ]
        );
    }

    #[test]
    fn an_empty_report_is_an_error() {
        assert!(parse_report("[]", &[]).is_err());
        assert!(parse_report("not json", &[]).is_err());
    }
}
