//! Anthropic Messages streams in the recorded format.
