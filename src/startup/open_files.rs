//! The open-files limit and the connection budget under it.
//!
//! Every connection is a file descriptor. A process that accepts until `accept` fails
//! with `EMFILE` wedges: actix keeps retrying the accept, health checks and sends find no
//! descriptor, the database pool cannot connect. Many services start with a soft limit of
//! 1 024 (systemd's default, many base images) under a far higher hard limit, so the
//! server first raises the soft limit to the hard one, then accepts at most
//! `server.max_connections` connections (by default the limit less
//! `server.reserved_fds`): past it a listener stops accepting until a connection closes,
//! and the descriptors the process needs for itself are always there. Event streams get
//! a cap of their own below the HTTP share (`streaming.max_streams`), so a crowd of
//! subscribers never takes the connections a health check or a send needs.

use crate::config::{ConfigError, Settings};

/// The connections each listener accepts at once, and the streams open at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// HTTP connections (three quarters of `server.max_connections`, or all of it when
    /// gRPC is off).
    pub http: usize,
    /// gRPC connections (the rest).
    pub grpc: usize,
    /// SSE and gRPC event streams (`streaming.max_streams`).
    pub streams: usize,
}

impl Budget {
    /// The budget under a soft open-files limit of `soft`.
    pub fn new(settings: &Settings, soft: u64, grpc: bool) -> Result<Self, ConfigError> {
        let soft = usize::try_from(soft).unwrap_or(usize::MAX);
        let configured_reserve = settings.server.reserved_fds;
        // A small limit keeps half for connections rather than none.
        let reserve = if soft < configured_reserve.saturating_mul(2) {
            soft / 2
        } else {
            configured_reserve
        };
        let room = soft.saturating_sub(reserve);
        let total = match settings.server.max_connections {
            0 => room,
            n if n > room => {
                return Err(ConfigError::Key {
                    key: "server.max_connections",
                    problem: format!(
                        "is {n}, but the open-files limit is {soft} and {reserve} of it are \
                         reserved (server.reserved_fds): at most {room} connections fit — \
                         raise the limit (LimitNOFILE, ulimit -n) or lower the setting"
                    ),
                });
            }
            n => n,
        };
        let (http, grpc) = match grpc {
            true => {
                let grpc = (total / 4).max(1);
                (total.saturating_sub(grpc).max(1), grpc)
            }
            false => (total.max(1), 0),
        };
        let streams = match settings.streaming.max_streams {
            0 => (http - http / 4).max(1),
            n => n,
        };
        Ok(Self {
            http,
            grpc,
            streams,
        })
    }

    /// A listener's connections per worker (actix counts them per worker).
    pub fn per_worker(connections: usize, workers: usize) -> usize {
        (connections / workers.max(1)).max(1)
    }
}

/// Raises the soft open-files limit to the hard one; returns `(soft, hard)` as they are
/// afterwards (and the soft limit before). Where the limits cannot be read (not Unix),
/// reports them as unlimited.
pub fn raise_limit() -> (u64, u64, u64) {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct it is given, which lives on this stack.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return (u64::MAX, u64::MAX, u64::MAX);
        }
        let before = limit.rlim_cur;
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            // SAFETY: setrlimit reads the struct it is given.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                limit.rlim_cur = limit.rlim_max;
            }
        }
        (before, limit.rlim_cur, limit.rlim_max)
    }
    #[cfg(not(unix))]
    {
        (u64::MAX, u64::MAX, u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(max_connections: usize, reserved: usize, max_streams: usize) -> Settings {
        let mut s = Settings::default();
        s.server.max_connections = max_connections;
        s.server.reserved_fds = reserved;
        s.streaming.max_streams = max_streams;
        s
    }

    #[test]
    fn the_budget_is_the_limit_less_the_reserve() {
        let b = Budget::new(&settings(0, 256, 0), 20_000, true).unwrap();
        assert_eq!((b.http, b.grpc, b.streams), (14_808, 4_936, 11_106));
        // Without gRPC, HTTP has it all.
        let b = Budget::new(&settings(0, 256, 0), 1_280, false).unwrap();
        assert_eq!((b.http, b.grpc, b.streams), (1_024, 0, 768));
        // Under a small limit half is kept for connections.
        let b = Budget::new(&settings(0, 256, 0), 256, true).unwrap();
        assert_eq!((b.http, b.grpc, b.streams), (96, 32, 72));
        // Set explicitly.
        let b = Budget::new(&settings(400, 256, 50), 20_000, true).unwrap();
        assert_eq!((b.http, b.grpc, b.streams), (300, 100, 50));
        assert_eq!(Budget::per_worker(300, 4), 75);
        assert_eq!(Budget::per_worker(1, 4), 1);
    }

    #[test]
    fn more_connections_than_the_limit_holds_is_refused_naming_the_key() {
        let e = Budget::new(&settings(2_000, 256, 0), 1_024, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("server.max_connections"), "{e}");
        assert!(e.contains("at most 768 connections"), "{e}");
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let (before, soft, hard) = raise_limit();
        assert!(before <= soft);
        // An unlimited hard limit cannot be the soft one (the kernel caps open files).
        assert!(
            soft == hard || hard == libc::RLIM_INFINITY,
            "{soft} of {hard}"
        );
    }
}
