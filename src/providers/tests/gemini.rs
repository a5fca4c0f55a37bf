//! Gemini streamGenerateContent streams in the recorded format.
