//! Tests for the session module (filled in below).
