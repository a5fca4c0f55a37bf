//! Where a knowledge item lives on disk, and the checks that keep it there.
//!
//! A client names an item by a relative path (`adr/0001-use-postgres`); the file is
//! `<repo>/<tenant>/<layer>/<path>.md`. The original knowledge repository joined raw
//! paths and then checked `Path::starts_with`, which is lexical: `../../x` passed and was
//! written outside the repository. Here a path is refused twice over: first by its
//! spelling ([`ItemPath::parse`] allows only `[A-Za-z0-9._-]` segments, no `.`/`..`, no
//! hidden names), then on disk (`resolve.rs`): every existing component is inspected with
//! `symlink_metadata` (a symlink anywhere is refused) and the parent folder, once
//! canonicalised, must lie inside the canonical layer folder.

use std::fmt;

use crate::skills::governance::Layer;

/// Longest item path, in bytes (without the `.md` extension).
pub const MAX_PATH_LEN: usize = 200;
/// Most segments in an item path (so also the deepest folder scanned).
pub const MAX_SEGMENTS: usize = 8;
/// Longest tenant id usable as a folder name.
pub const MAX_TENANT_LEN: usize = 100;
/// Extension of every item file; item paths are written without it.
pub const ITEM_EXTENSION: &str = ".md";

/// Why a path (or tenant, or item id) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path must not be empty")]
    Empty,
    #[error("path must be at most {MAX_PATH_LEN} bytes")]
    TooLong,
    #[error("path must be relative (it starts with `/`)")]
    Absolute,
    #[error("path must separate segments with `/`, not `\\`")]
    Backslash,
    #[error("path must not contain NUL")]
    Nul,
    #[error("path must have at most {MAX_SEGMENTS} segments")]
    TooDeep,
    #[error("path has an empty segment (`//` or a trailing `/`)")]
    EmptySegment,
    #[error("path segment {0:?} is not allowed")]
    DotSegment(String),
    #[error("path segment {0:?} must not start with `.`")]
    Hidden(String),
    #[error("path segment {0:?} may only contain A-Z, a-z, 0-9, `.`, `_` and `-`")]
    BadCharacter(String),
    #[error("path segment {0:?} must not end with `.md` (items are named without it)")]
    ReservedSuffix(String),
    #[error(
        "tenant {0:?} cannot name a folder (1 to {MAX_TENANT_LEN} of A-Z, a-z, 0-9, `.`, `_`, `-`, not starting with `.`)"
    )]
    Tenant(String),
    #[error("item id {0:?} must be `<layer>/<path>` with layer project, team, org or company")]
    BadId(String),
    #[error("path goes through a symbolic link ({0})")]
    Symlink(String),
    #[error("path resolves outside the layer folder")]
    Escapes,
    #[error("{0} is in the way (a file where a folder is needed, or the reverse)")]
    InTheWay(String),
}

/// One segment is safe on every file system we care about and never special to git
/// (`.git`, `.gitignore` start with a dot and are refused).
fn check_segment(segment: &str) -> Result<(), PathError> {
    if segment.is_empty() {
        return Err(PathError::EmptySegment);
    }
    if segment == "." || segment == ".." {
        return Err(PathError::DotSegment(segment.to_owned()));
    }
    if segment.starts_with('.') {
        return Err(PathError::Hidden(segment.to_owned()));
    }
    if !segment
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(PathError::BadCharacter(segment.to_owned()));
    }
    Ok(())
}

fn has_item_extension(segment: &str) -> bool {
    segment.len() >= ITEM_EXTENSION.len()
        && segment[segment.len() - ITEM_EXTENSION.len()..].eq_ignore_ascii_case(ITEM_EXTENSION)
}

/// A tenant id that is safe as one folder name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantDir(String);

impl TenantDir {
    /// Accepts a tenant id that is a single safe path segment.
    pub fn parse(raw: &str) -> Result<Self, PathError> {
        if raw.len() > MAX_TENANT_LEN || check_segment(raw).is_err() {
            return Err(PathError::Tenant(
                raw.chars().take(MAX_TENANT_LEN).collect(),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The tenant id, which is also its folder's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A validated item path inside a layer, without the `.md` extension.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ItemPath(String);

impl ItemPath {
    /// Accepts a relative path of safe segments. One trailing `.md` is dropped, so
    /// `adr/0001.md` and `adr/0001` name the same item; no segment may end with `.md`
    /// after that, so a folder `x.md/` can never shadow the file of item `x`.
    pub fn parse(raw: &str) -> Result<Self, PathError> {
        if raw.is_empty() {
            return Err(PathError::Empty);
        }
        if raw.contains('\0') {
            return Err(PathError::Nul);
        }
        if raw.contains('\\') {
            return Err(PathError::Backslash);
        }
        if raw.starts_with('/') {
            return Err(PathError::Absolute);
        }
        let path = if has_item_extension(raw) {
            &raw[..raw.len() - ITEM_EXTENSION.len()]
        } else {
            raw
        };
        if path.len() > MAX_PATH_LEN {
            return Err(PathError::TooLong);
        }
        let segments: Vec<&str> = path.split('/').collect();
        if segments.len() > MAX_SEGMENTS {
            return Err(PathError::TooDeep);
        }
        for segment in &segments {
            check_segment(segment)?;
            if has_item_extension(segment) {
                return Err(PathError::ReservedSuffix((*segment).to_owned()));
            }
        }
        Ok(Self(path.to_owned()))
    }

    /// The path, `/`-separated, without `.md`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub(super) fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

impl fmt::Display for ItemPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An item's identity within a tenant: its layer and path, `"<layer>/<path>"` on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ItemId {
    pub layer: Layer,
    pub path: ItemPath,
}

impl ItemId {
    /// The id of the item at `path` in `layer`.
    pub fn new(layer: Layer, path: ItemPath) -> Self {
        Self { layer, path }
    }

    /// Parses `"project/adr/0001-use-postgres"`.
    pub fn parse(raw: &str) -> Result<Self, PathError> {
        let bad = || PathError::BadId(raw.chars().take(MAX_PATH_LEN).collect());
        let (layer, path) = raw.split_once('/').ok_or_else(bad)?;
        let layer = Layer::ALL
            .into_iter()
            .find(|l| l.as_str() == layer)
            .ok_or_else(bad)?;
        Ok(Self {
            layer,
            path: ItemPath::parse(path)?,
        })
    }

    /// The file's path relative to the repository root, with `/` separators: what git's
    /// index is given.
    pub fn relative_file(&self, tenant: &TenantDir) -> String {
        format!(
            "{}/{}/{}{ITEM_EXTENSION}",
            tenant.as_str(),
            self.layer.as_str(),
            self.path.as_str()
        )
    }
}

impl fmt::Display for ItemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.layer.as_str(), self.path.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_paths_parse_and_drop_one_md_extension() {
        assert_eq!(
            ItemPath::parse("adr/0001-use_pg.v2").unwrap().as_str(),
            "adr/0001-use_pg.v2"
        );
        assert_eq!(ItemPath::parse("adr/0001.md").unwrap().as_str(), "adr/0001");
        assert_eq!(ItemPath::parse("x").unwrap().as_str(), "x");
    }

    #[test]
    fn unsafe_spellings_are_refused() {
        let refused = |raw: &str| ItemPath::parse(raw).unwrap_err();
        assert_eq!(refused(""), PathError::Empty);
        assert_eq!(refused("../x"), PathError::DotSegment("..".into()));
        assert_eq!(refused("a/../../b"), PathError::DotSegment("..".into()));
        assert_eq!(refused("a/./b"), PathError::DotSegment(".".into()));
        assert_eq!(refused("/etc/passwd"), PathError::Absolute);
        assert_eq!(refused("..\\x"), PathError::Backslash);
        assert_eq!(refused("a\0b"), PathError::Nul);
        assert_eq!(refused("a//b"), PathError::EmptySegment);
        assert_eq!(refused("a/"), PathError::EmptySegment);
        assert_eq!(refused(".git/config"), PathError::Hidden(".git".into()));
        assert_eq!(refused("a b"), PathError::BadCharacter("a b".into()));
        assert_eq!(refused("é"), PathError::BadCharacter("é".into()));
        assert_eq!(refused("x.md/y"), PathError::ReservedSuffix("x.md".into()));
        assert_eq!(refused("x.md.md"), PathError::ReservedSuffix("x.md".into()));
        assert_eq!(refused(&"a".repeat(MAX_PATH_LEN + 1)), PathError::TooLong);
        assert_eq!(
            refused(&["a"; MAX_SEGMENTS + 1].join("/")),
            PathError::TooDeep
        );
    }

    #[test]
    fn tenants_must_be_one_safe_segment() {
        assert!(TenantDir::parse("acme-corp_1").is_ok());
        for bad in ["", ".", "..", "a/b", "../x", ".hidden", "a\\b", "a b"] {
            assert!(TenantDir::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(TenantDir::parse(&"t".repeat(MAX_TENANT_LEN + 1)).is_err());
    }

    #[test]
    fn ids_name_a_layer_and_a_path() {
        let id = ItemId::parse("project/adr/0001").unwrap();
        assert_eq!((id.layer, id.path.as_str()), (Layer::Project, "adr/0001"));
        assert_eq!(id.to_string(), "project/adr/0001");
        let tenant = TenantDir::parse("acme").unwrap();
        assert_eq!(id.relative_file(&tenant), "acme/project/adr/0001.md");
        for bad in ["adr/0001", "project", "project/", "Project/x", "team/../x"] {
            assert!(ItemId::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
