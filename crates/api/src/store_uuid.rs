//! The CN store UUID MatrixOne derives from a pod's DNS name.
//!
//! MatrixOne's CN start script hashes the pod's service DNS name and reads
//! the first 16 characters of the hex digest as eight little-endian 16-bit
//! words; the operator must compute the same UUID to find the pod's store in
//! HAKeeper.

use sha2::{Digest, Sha256};

/// The CN store UUID of pod `pod` behind headless Service `subdomain` in
/// `namespace`.
pub fn cn_store_uuid(pod: &str, subdomain: &str, namespace: &str) -> String {
    let digest = Sha256::digest(format!("{pod}.{subdomain}.{namespace}.svc\n").as_bytes());
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    // The words are read from the ASCII text of the digest, not its bytes.
    let words: Vec<u16> =
        hex.as_bytes()[..16].chunks_exact(2).map(|pair| u16::from_le_bytes([pair[0], pair[1]])).collect();
    format!(
        "{:04x}{:04x}-{:04x}-{:04x}-{:04x}-{:04x}{:04x}{:04x}",
        words[0], words[1], words[2], words[3], words[4], words[5], words[6], words[7]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_test_vector() {
        assert_eq!(cn_store_uuid("mo-cn-0", "mo-cn-headless", "default"), "62333133-3462-6162-3339-633436306439");
    }

    #[test]
    fn each_name_part_changes_the_uuid() {
        let base = cn_store_uuid("mo-cn-0", "mo-cn-headless", "default");
        assert_ne!(base, cn_store_uuid("mo-cn-1", "mo-cn-headless", "default"));
        assert_ne!(base, cn_store_uuid("mo-cn-0", "other-headless", "default"));
        assert_ne!(base, cn_store_uuid("mo-cn-0", "mo-cn-headless", "tenant"));
    }
}
