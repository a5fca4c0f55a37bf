//! Tests of the session module as a whole: property tests of truncation, `append_event`
//! and `events` together (`properties`).

mod properties;
