//! The content hash of a memory.

#[test]
fn content_hash_is_hex_sha256() {
    assert_eq!(
        super::super::content_hash("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}
