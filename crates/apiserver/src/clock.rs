//! Time and identifiers, injectable so that a simulation is deterministic.

use jiff::Timestamp;

/// Where the server reads the time (creation and deletion timestamps,
/// table ages).
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

/// The wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// Kubernetes writes times at second precision.
pub fn rfc3339(time: Timestamp) -> String {
    let seconds = Timestamp::from_second(time.as_second()).unwrap_or(time);
    seconds.to_string()
}

/// Deterministic UIDs and name suffixes from a seed (splitmix64).
pub struct Ids {
    state: u64,
}

/// The alphabet of `generateName` suffixes: no vowels, no look-alikes.
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

impl Ids {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A version-4-shaped UUID.
    pub fn uid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0x0fff,
            ((b >> 48) & 0x3fff) | 0x8000,
            b & 0xffff_ffff_ffff
        )
    }

    /// Five characters for `generateName`.
    pub fn suffix(&mut self) -> String {
        (0..5).map(|_| SUFFIX_ALPHABET[(self.next() % SUFFIX_ALPHABET.len() as u64) as usize] as char).collect()
    }
}
