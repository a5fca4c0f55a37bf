//! Tests of the protocol seam as a whole: the method names of every version (`methods`)
//! and the cross-dialect round trips and shape rules (`wire`).

mod methods;
mod wire;
