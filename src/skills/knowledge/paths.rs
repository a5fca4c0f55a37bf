//! Where a knowledge item lives on disk, and the checks that keep it there.
//!
//! A client names an item by a relative path (`adr/0001-use-postgres`); the file is
//! `<repo>/<tenant>/<layer>/<path>.md`. The original knowledge repository joined raw
//! paths and then checked `Path::starts_with`, which is lexical: `../../x` passed and was
//! written outside the repository. Here a path is refused twice over: first by its
//! spelling ([`ItemPath::parse`] allows only `[A-Za-z0-9._-]` segments, no `.`/`..`, no
//! hidden names), then on disk ([`resolve_for_write`], [`resolve_for_read`]): every
//! existing component is inspected with `symlink_metadata` (a symlink anywhere is refused)
//! and the parent folder, once canonicalised, must lie inside the canonical layer folder.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::error::KnowledgeError;
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

    fn segments(&self) -> impl Iterator<Item = &str> {
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

/// The folder holding a tenant's items of one layer (which may not exist yet).
pub fn layer_dir(root: &Path, tenant: &TenantDir, layer: Layer) -> PathBuf {
    root.join(tenant.as_str()).join(layer.as_str())
}

/// The file of `id`, with every folder on the way created and checked. `root` must be
/// canonical. Refuses symlinks and anything that is not a folder on the way, an existing
/// non-file at the end, and a parent that canonicalises outside the layer folder.
pub fn resolve_for_write(
    root: &Path,
    tenant: &TenantDir,
    id: &ItemId,
) -> Result<PathBuf, KnowledgeError> {
    let file = walk(root, tenant, id, true)?;
    file.ok_or_else(|| {
        // `walk` with `create` only returns `None` if a folder vanished under us.
        KnowledgeError::Io(io::Error::other("a folder disappeared while writing"))
    })
}

/// The file of `id` if every component on the way exists and is safe; `None` when some
/// component is missing (the item does not exist). Refuses as [`resolve_for_write`] does.
pub fn resolve_for_read(
    root: &Path,
    tenant: &TenantDir,
    id: &ItemId,
) -> Result<Option<PathBuf>, KnowledgeError> {
    walk(root, tenant, id, false)
}

fn walk(
    root: &Path,
    tenant: &TenantDir,
    id: &ItemId,
    create: bool,
) -> Result<Option<PathBuf>, KnowledgeError> {
    let mut folders: Vec<&str> = vec![tenant.as_str(), id.layer.as_str()];
    let segments: Vec<&str> = id.path.segments().collect();
    let (last, parents) = segments
        .split_last()
        .ok_or(KnowledgeError::Path(PathError::Empty))?;
    folders.extend_from_slice(parents);

    let mut current = root.to_path_buf();
    for folder in folders {
        current.push(folder);
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(refused_symlink(root, &current));
            }
            Ok(meta) if !meta.is_dir() => return Err(in_the_way(root, &current)),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !create {
                    return Ok(None);
                }
                match fs::create_dir(&current) {
                    Ok(()) => {}
                    // Created concurrently (a reader never creates; a second writer
                    // cannot exist): inspect what is there now.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        let meta = fs::symlink_metadata(&current)?;
                        if !meta.is_dir() || meta.file_type().is_symlink() {
                            return Err(in_the_way(root, &current));
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }

    let file = current.join(format!("{last}{ITEM_EXTENSION}"));
    let exists = match fs::symlink_metadata(&file) {
        Ok(meta) if meta.file_type().is_symlink() => return Err(refused_symlink(root, &file)),
        Ok(meta) if !meta.is_file() => return Err(in_the_way(root, &file)),
        Ok(_) => true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e.into()),
    };

    // Belt and braces: the components were checked one by one, but the final word is the
    // canonical location of the parent compared with the canonical layer folder.
    let layer = fs::canonicalize(layer_dir(root, tenant, id.layer))?;
    let parent = fs::canonicalize(&current)?;
    if !layer.starts_with(root) || !parent.starts_with(&layer) {
        return Err(PathError::Escapes.into());
    }
    if !create && !exists {
        return Ok(None);
    }
    Ok(Some(file))
}

fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

fn refused_symlink(root: &Path, path: &Path) -> KnowledgeError {
    PathError::Symlink(shown(root, path)).into()
}

fn in_the_way(root: &Path, path: &Path) -> KnowledgeError {
    PathError::InTheWay(shown(root, path)).into()
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

    #[test]
    fn resolution_creates_folders_inside_the_layer_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        let tenant = TenantDir::parse("acme").unwrap();
        let id = ItemId::parse("team/adr/deep/x").unwrap();
        assert_eq!(resolve_for_read(&root, &tenant, &id).unwrap(), None);
        let file = resolve_for_write(&root, &tenant, &id).unwrap();
        assert_eq!(file, root.join("acme/team/adr/deep/x.md"));
        assert!(root.join("acme/team/adr/deep").is_dir());
        assert_eq!(
            resolve_for_read(&root, &tenant, &id).unwrap(),
            None,
            "no file yet"
        );
        fs::write(&file, "x").unwrap();
        assert_eq!(resolve_for_read(&root, &tenant, &id).unwrap(), Some(file));
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_anywhere_on_the_way_are_refused() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        let tenant = TenantDir::parse("acme").unwrap();
        fs::create_dir_all(root.join("acme/project")).unwrap();
        symlink(outside.path(), root.join("acme/project/evil")).unwrap();
        symlink(outside.path(), root.join("acme/team")).unwrap();
        symlink(outside.path().join("f.md"), root.join("acme/project/f.md")).unwrap();
        for raw in ["project/evil/x", "team/x", "project/f"] {
            let id = ItemId::parse(raw).unwrap();
            let err = resolve_for_write(&root, &tenant, &id).unwrap_err();
            assert!(
                matches!(err, KnowledgeError::Path(PathError::Symlink(_))),
                "{raw}: {err:?}"
            );
            assert!(resolve_for_read(&root, &tenant, &id).is_err());
        }
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
