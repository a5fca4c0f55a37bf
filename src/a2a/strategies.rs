//! Test generators shared by the property tests that hold a shortcut reader or writer
//! (`fast_send`, `grpc::direct`) to the general road.

use proptest::prelude::*;
use proptest::strategy::ValueTree;

/// Strings among which the readers' rules differ: empty, control characters, too long,
/// escapes, non-ASCII.
pub(crate) fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just(String::new()),
        1 => Just("\u{7}".to_owned()),
        1 => Just("x".repeat(300)),
        12 => "[a-z0-9\\-]{1,12}",
        3 => "\\PC{0,8}",
    ]
}

/// How many of `tries` values drawn from `strategy` (deterministically) `takes`: a
/// generator must reach the shortcut often, not only its refusals.
pub(crate) fn taken<S: Strategy>(
    strategy: S,
    tries: usize,
    mut takes: impl FnMut(&S::Value) -> bool,
) -> usize {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    (0..tries)
        .filter(|_| match strategy.new_tree(&mut runner) {
            Ok(tree) => takes(&tree.current()),
            Err(e) => panic!("the generator failed: {e}"),
        })
        .count()
}
