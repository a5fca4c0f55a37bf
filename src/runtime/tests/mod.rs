//! Tests of the runtime as a whole: the write path of a turn over a store that counts and
//! cuts its commits (`write_path`).

mod write_path;
