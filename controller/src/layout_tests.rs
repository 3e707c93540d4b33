//! The direction of the dependencies between top-level modules, read from the
//! source: a module depends on another when one of its files (tests and doc
//! links included) names a path starting with `crate::<other>`.
//!
//! `grpc` serves `provider`, which drives `install`, and all three count in
//! `metrics`. Each may use the ones after it in [`LAYERS`] and none before,
//! not even through another module (`install` -> `catalog` -> `provider`
//! would be a cycle too). What the others share goes down a layer, or up
//! through a port that the lower module declares and `main` wires (see
//! `metrics::serve`'s `is_leader`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

const LAYERS: [&str; 4] = ["grpc", "provider", "install", "metrics"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            rust_files(&entry.unwrap().path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// The top-level modules named as `crate::<name>` in `text`.
fn named_modules(text: &str) -> BTreeSet<String> {
    let prefix = concat!("crate", "::");
    text.match_indices(prefix)
        .map(|(at, _)| {
            text[at + prefix.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// Every top-level module of the library and the modules it uses.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(src()).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if matches!(stem, "lib" | "main" | "bin") {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&path, &mut files);
        let uses: &mut BTreeSet<String> = graph.entry(stem.to_string()).or_default();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            uses.extend(named_modules(&text).into_iter().filter(|m| m != stem));
        }
    }
    graph
}

/// A chain of uses from `from` to `to`, if there is one.
fn path(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(module) = queue.pop_front() {
        if module == to {
            let mut chain = vec![to.to_string()];
            let mut at = to;
            while let Some(prev) = came_from.get(at) {
                chain.push(prev.to_string());
                at = prev;
            }
            chain.reverse();
            return Some(chain);
        }
        for next in graph.get(module).into_iter().flatten() {
            if next != from && !came_from.contains_key(next.as_str()) {
                came_from.insert(next.as_str(), module);
                queue.push_back(next);
            }
        }
    }
    None
}

#[test]
fn the_layers_are_read_from_the_source() {
    let graph = graph();
    for layer in LAYERS {
        assert!(graph.contains_key(layer), "no module {layer} in {graph:?}");
    }
    assert!(graph["grpc"].contains("provider"), "{graph:?}");
    assert!(graph["provider"].contains("install"), "{graph:?}");
}

#[test]
fn grpc_provider_install_metrics_only_depend_downwards() {
    let graph = graph();
    for (i, upper) in LAYERS.iter().enumerate() {
        for lower in &LAYERS[i + 1..] {
            if let Some(chain) = path(&graph, lower, upper) {
                panic!(
                    "{lower} depends on {upper}: {}; move what they share down a layer \
                     or declare a port in {lower}",
                    chain.join(" -> ")
                );
            }
        }
    }
}
