//! The layering ARCHITECTURE.md promises, checked on the source:
//!
//! - every `crate::` path of a module names only the layers below it ([`LAYERS`]), and
//!   `config` names none at all;
//! - no two files of `src/` import each other, directly or around a circle.
//!
//! The scan reads the module tree from `src/lib.rs` (`mod x;` declarations, leaving out
//! the ones under `#[cfg(test)]`) and, in each file, the code before its `mod tests`. An
//! import is every `crate::`, `super::` or `self::` path (a `use` tree flattened), and a
//! child module named by a `use`; a path leads to the deepest module file it names. A
//! file's own parent and children (a `mod.rs` and the files of its folder) are not
//! counted against each other: a parent declares its children and they use its types.
//! Re-exports are not followed: a name used through a parent's `pub use` counts as the
//! parent's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules, highest first. A module may name those in later rows only;
/// those in one row know nothing of each other.
const LAYERS: &[&[&str]] = &[
    &["main", "lib", "cli"],
    &["startup"],
    &["http", "grpc"],
    &["service"],
    &["client"],
    &["push"],
    &["outbound"],
    &["a2a"],
    &["runtime"],
    &["cluster"],
    &["agent"],
    &["session"],
    &["skills"],
    &["providers"],
    &["store"],
    &["error"],
    &["domain"],
    &["telemetry"],
    &["config"],
];

/// A module path inside the crate (`["store", "sqlite", "claims"]`).
type ModPath = Vec<String>;

/// The crate's modules: their files, and for each file the code the checks read.
struct Tree {
    files: BTreeMap<ModPath, PathBuf>,
    code: BTreeMap<ModPath, String>,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

impl Tree {
    /// The library's modules and the binary's root.
    fn read() -> Tree {
        let mut tree = Tree {
            files: BTreeMap::new(),
            code: BTreeMap::new(),
        };
        tree.add(vec![], src().join("lib.rs"));
        tree.add(vec!["main".into()], src().join("main.rs"));
        tree
    }

    fn add(&mut self, path: ModPath, file: PathBuf) {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        let dir = match file.file_name().unwrap().to_str().unwrap() {
            "lib.rs" | "main.rs" | "mod.rs" => file.parent().unwrap().to_path_buf(),
            name => file.parent().unwrap().join(name.trim_end_matches(".rs")),
        };
        let code = without_tests(&text);
        for child in declared_modules(&code) {
            let (flat, folder) = (
                dir.join(format!("{child}.rs")),
                dir.join(&child).join("mod.rs"),
            );
            let found = match (flat.exists(), folder.exists()) {
                (true, false) => flat,
                (false, true) => folder,
                _ => panic!("module {child} of {file:?}: not exactly one of {flat:?}, {folder:?}"),
            };
            let mut child_path = path.clone();
            child_path.push(child);
            self.add(child_path, found);
        }
        self.files.insert(path.clone(), file);
        self.code.insert(path, code);
    }

    /// The module file a path from `at` leads to, if it names one of the crate's.
    fn resolve(&self, at: &ModPath, segments: &[String]) -> Option<ModPath> {
        let mut target: ModPath = match segments.first()?.as_str() {
            "crate" => vec![],
            "self" => at.clone(),
            "super" => {
                let mut up = at.clone();
                up.pop()?;
                up
            }
            child => {
                let mut down = at.clone();
                down.push(child.to_owned());
                if !self.files.contains_key(&down) {
                    return None;
                }
                down
            }
        };
        for segment in &segments[1..] {
            if segment == "super" {
                target.pop()?;
                continue;
            }
            let mut deeper = target.clone();
            deeper.push(segment.clone());
            if !self.files.contains_key(&deeper) {
                break;
            }
            target = deeper;
        }
        Some(target)
    }

    /// Each file's imports of other files (parents and children left out), with the
    /// line that makes each.
    fn imports(&self) -> BTreeMap<ModPath, BTreeMap<ModPath, String>> {
        let mut all = BTreeMap::new();
        for (at, code) in &self.code {
            let mut mine: BTreeMap<ModPath, String> = BTreeMap::new();
            for (line, path) in paths(code) {
                let Some(to) = self.resolve(at, &path) else {
                    continue;
                };
                if to.starts_with(at) || at.starts_with(&to) {
                    continue;
                }
                mine.entry(to).or_insert(line);
            }
            all.insert(at.clone(), mine);
        }
        all
    }

    fn name(&self, path: &ModPath) -> String {
        let file = &self.files[path];
        file.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")))
            .unwrap_or(file)
            .display()
            .to_string()
    }
}

/// `text` without its unit tests: everything from a `#[cfg(test)]` module on (they sit
/// at the end of the file, CONTRIBUTING.md), and comment lines.
fn without_tests(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut kept = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim();
        if trimmed == "#[cfg(test)]" {
            let next = lines.get(i + 1).map(|l| l.trim()).unwrap_or("");
            if next.starts_with("mod ") && next.ends_with('{') {
                break;
            }
        }
        if !trimmed.starts_with("//") {
            kept.push(*line);
        }
    }
    kept.join("\n")
}

/// The modules a file declares as files of their own (`mod x;`), but for the ones only
/// tests compile.
fn declared_modules(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut test_only = false;
    for line in code.lines().map(str::trim) {
        if line.starts_with("#[cfg(test)]") {
            test_only = true;
            continue;
        }
        if line.starts_with("#[") {
            continue;
        }
        let declaration = line
            .strip_prefix("pub ")
            .or_else(|| line.strip_prefix("pub(crate) "))
            .or_else(|| line.strip_prefix("pub(super) "))
            .unwrap_or(line);
        if let Some(name) = declaration
            .strip_prefix("mod ")
            .and_then(|rest| rest.strip_suffix(';'))
            && !test_only
        {
            found.push(name.trim().to_owned());
        }
        test_only = false;
    }
    found
}

/// Every path a file names that may lead into the crate, as segments, with its line:
/// the trees of its `use` items flattened, and `crate::`/`super::`/`self::` paths
/// anywhere in its code.
fn paths(code: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(start) = find_use(rest) {
        let after = &rest[start..];
        let Some(end) = after.find(';') else { break };
        let item = &after[..end];
        let line = item.lines().next().unwrap_or("").trim().to_owned();
        let tree = item
            .trim_start()
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ")
            .trim_start_matches("use ");
        for path in flatten(tree) {
            found.push((line.clone(), path));
        }
        rest = &after[end..];
    }
    for line in code.lines() {
        let bytes = line.as_bytes();
        for root in ["crate::", "super::", "self::"] {
            let mut from = 0;
            while let Some(i) = line[from..].find(root).map(|i| i + from) {
                from = i + root.len();
                let boundary = i == 0
                    || !(bytes[i - 1].is_ascii_alphanumeric()
                        || bytes[i - 1] == b'_'
                        || bytes[i - 1] == b':');
                if !boundary {
                    continue;
                }
                let path: Vec<String> = line[i..]
                    .split("::")
                    .map(|s| {
                        s.chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect::<String>()
                    })
                    .take_while(|s| !s.is_empty())
                    .collect();
                found.push((line.trim().to_owned(), path));
            }
        }
    }
    found
}

/// Where the next `use` item begins in `text` (at the start of a line).
fn find_use(text: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let item = trimmed
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ");
        if item.starts_with("use ") {
            return Some(offset + (line.len() - trimmed.len()));
        }
        offset += line.len();
    }
    None
}

/// The paths of a `use` tree: `a::{b::{c, d}, e as f}` → `a::b::c`, `a::b::d`, `a::e`.
fn flatten(tree: &str) -> Vec<Vec<String>> {
    // Renamings left out (`x as y`): the path is `x`'s.
    let mut words = tree.split_whitespace();
    let mut tree = String::new();
    while let Some(word) = words.next() {
        if word == "as" {
            let alias = words.next().unwrap_or("");
            tree.extend(
                alias
                    .chars()
                    .skip_while(|c| c.is_ascii_alphanumeric() || *c == '_'),
            );
        } else {
            tree.push_str(word);
        }
    }
    let mut out = Vec::new();
    expand(&[], &tree, &mut out);
    out
}

fn expand(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    match tree.find('{') {
        Some(open) if tree.ends_with('}') => {
            let mut base = prefix.to_vec();
            base.extend(segments(tree[..open].trim_end_matches("::")));
            for part in split_top(&tree[open + 1..tree.len() - 1]) {
                expand(&base, part, out);
            }
        }
        _ => {
            let mut path = prefix.to_vec();
            path.extend(segments(tree));
            if !path.is_empty() {
                out.push(path);
            }
        }
    }
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty() && *s != "*")
        .map(str::to_owned)
        .collect()
}

/// `a, b::{c, d}, e` split at its top-level commas.
fn split_top(list: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

fn rank(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|row| row.contains(&module))
        .unwrap_or_else(|| panic!("module {module} is in no row of LAYERS"))
}

fn top(path: &ModPath) -> &str {
    path.first().map_or("lib", String::as_str)
}

#[test]
fn every_module_imports_only_the_layers_below_it() {
    let tree = Tree::read();
    assert!(
        tree.files.len() > 200
            && tree
                .files
                .contains_key(&vec!["store".into(), "fence".into()]),
        "the scan found the crate's files: {}",
        tree.files.len()
    );
    let mut offences = Vec::new();
    for (at, imports) in tree.imports() {
        let from = top(&at);
        for (to, line) in imports {
            let to_module = top(&to);
            if from == to_module || to.is_empty() {
                continue;
            }
            let allowed = match from {
                "config" => false,
                _ => rank(to_module) > rank(from),
            };
            if !allowed {
                offences.push(format!("{} -> {}: {line}", tree.name(&at), tree.name(&to)));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "imports against the layering (a module names only the rows below it in LAYERS; \
         `config` names nothing of the crate):\n{}",
        offences.join("\n")
    );
}

#[test]
fn no_files_of_src_import_each_other_around_a_circle() {
    let tree = Tree::read();
    let imports = tree.imports();
    let circles = circles(&imports);
    let described: Vec<String> = circles
        .iter()
        .map(|circle| {
            let members: BTreeSet<&ModPath> = circle.iter().collect();
            let mut lines = vec![format!(
                "{} files: {}",
                circle.len(),
                circle
                    .iter()
                    .map(|p| tree.name(p))
                    .collect::<Vec<_>>()
                    .join(", ")
            )];
            for from in circle {
                for (to, line) in &imports[from] {
                    if members.contains(to) {
                        lines.push(format!(
                            "  {} -> {}: {line}",
                            tree.name(from),
                            tree.name(to)
                        ));
                    }
                }
            }
            lines.join("\n")
        })
        .collect();
    assert!(
        described.is_empty(),
        "files that import each other around a circle:\n{}",
        described.join("\n")
    );
}

/// The strongly connected sets of more than one file (Tarjan's algorithm).
fn circles(graph: &BTreeMap<ModPath, BTreeMap<ModPath, String>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        graph: &'a BTreeMap<ModPath, BTreeMap<ModPath, String>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a ModPath) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flat_map(|m| m.keys()) {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[w].min(s.low[v]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.index[w].min(s.low[v]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w.clone());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                s.found.push(set);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.found
}

#[test]
fn the_scan_reads_use_trees_and_leaves_tests_out() {
    assert_eq!(
        flatten("crate::store::{fence::{Fence, ThreadHold}, StoreError as E, self}"),
        [
            vec!["crate", "store", "fence", "Fence"],
            vec!["crate", "store", "fence", "ThreadHold"],
            vec!["crate", "store", "StoreError"],
            vec!["crate", "store", "self"],
        ]
        .map(|p| p.into_iter().map(str::to_owned).collect::<Vec<_>>())
    );
    let code = without_tests(
        "use crate::a::B;\n// crate::c::D\nfn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::e::F;\n}\n",
    );
    let found: Vec<Vec<String>> = paths(&code).into_iter().map(|(_, p)| p).collect();
    assert!(
        found.contains(&vec!["crate".into(), "a".into(), "B".into()]),
        "{found:?}"
    );
    assert!(
        !found
            .iter()
            .any(|p| p.contains(&"c".to_owned()) || p.contains(&"e".to_owned()))
    );
    assert_eq!(
        declared_modules("mod a;\npub mod b;\n#[cfg(test)]\nmod tests;\npub(crate) mod c;"),
        ["a", "b", "c"]
    );
    // A circle of two and a lone file.
    let p = |s: &str| vec![s.to_owned()];
    let graph = BTreeMap::from([
        (p("a"), BTreeMap::from([(p("b"), String::new())])),
        (p("b"), BTreeMap::from([(p("a"), String::new())])),
        (p("c"), BTreeMap::from([(p("a"), String::new())])),
    ]);
    assert_eq!(circles(&graph), [vec![p("a"), p("b")]]);
}
