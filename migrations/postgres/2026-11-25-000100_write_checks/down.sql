DROP FUNCTION a2a_require(boolean, text, text);
