//! Tests of the gRPC binding as a whole: the server's HTTP/2 connection to the official
//! generated client (`http2`).

mod http2;
