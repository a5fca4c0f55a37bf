//! How many lines one kind of notification from one server may put in the log: a few
//! per window, the rest counted and said in one line when the next window opens (the
//! metrics count every one), so that a server that floods its client with notifications
//! cannot fill the log.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Lines of a kind of notification logged per window.
pub(super) const LINES: u32 = 10;
/// Lines of a server's stderr logged per window (a traceback takes a few dozen).
pub(super) const STDERR_LINES: u32 = 200;
/// The window.
pub(super) const WINDOW: Duration = Duration::from_secs(10);

/// Whether a notification is logged.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// Logged, after saying how many the last window left out (when any were).
    Log { left_out: u64 },
    /// Only counted.
    Quiet,
}

pub(super) struct Budget {
    lines: u32,
    window: Mutex<Window>,
}

struct Window {
    opened: Instant,
    logged: u32,
    left_out: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Self::of(LINES)
    }
}

impl Budget {
    /// `lines` per window.
    pub(super) fn of(lines: u32) -> Self {
        Self {
            lines,
            window: Mutex::new(Window {
                opened: Instant::now(),
                logged: 0,
                left_out: 0,
            }),
        }
    }

    pub(super) fn admit(&self, now: Instant) -> Admit {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        let mut left_out = 0;
        if now.duration_since(window.opened) >= WINDOW {
            left_out = std::mem::take(&mut window.left_out);
            window.opened = now;
            window.logged = 0;
        }
        if window.logged < self.lines {
            window.logged += 1;
            Admit::Log { left_out }
        } else {
            window.left_out += 1;
            Admit::Quiet
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_per_window_are_logged_and_the_rest_said_in_one_line() {
        let budget = Budget::default();
        let start = Instant::now();
        let admitted: Vec<Admit> = (0..25).map(|_| budget.admit(start)).collect();
        assert_eq!(
            admitted.iter().filter(|a| **a != Admit::Quiet).count(),
            LINES as usize
        );
        assert_eq!(budget.admit(start + WINDOW), Admit::Log { left_out: 15 });
        assert_eq!(budget.admit(start + WINDOW), Admit::Log { left_out: 0 });
        let wide = Budget::of(STDERR_LINES);
        let logged = (0..1000)
            .filter(|_| wide.admit(start) != Admit::Quiet)
            .count();
        assert_eq!(logged, STDERR_LINES as usize);
    }
}
