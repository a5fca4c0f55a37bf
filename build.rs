//! Rebuilds the crate when a migration is added or changed: `embed_migrations!` reads the
//! `migrations/` directories at compile time, and cargo would not notice a new one.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
