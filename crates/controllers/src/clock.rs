//! The time of day the controllers read.

use std::sync::Arc;

use jiff::Timestamp;

/// Where the controllers read the time of day (timestamps they write,
/// drain and loss deadlines): the system clock in the operator, a virtual
/// one in the simulator. Durations come from `tokio::time::Instant`, which
/// the simulator's paused runtime drives as well.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> Timestamp + Send + Sync>);

impl Clock {
    pub fn new(now: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        Self(Arc::new(now))
    }

    pub fn now(&self) -> Timestamp {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new(Timestamp::now)
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Clock").field(&self.now()).finish()
    }
}
