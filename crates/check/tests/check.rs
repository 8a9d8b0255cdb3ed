//! The model checker on tiny configurations: the correct protocol passes,
//! and each broken variant is caught with a counterexample trace.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use cnpool_check::{Config, Variant, check};

#[test]
fn the_small_configuration_passes() {
    let report = check(Config::named("small").unwrap(), None, 2).unwrap();
    eprintln!("{}", report.render());
    assert!(report.violations.is_empty(), "{}", report.render());
    assert!(report.unique_states > 100, "the check explored too little: {}", report.render());
}
