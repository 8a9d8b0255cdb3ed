pub mod cnset;
pub mod gojson;
pub mod quantity;
pub mod spec;
pub mod toml;
pub mod version;
pub mod config;
pub mod deps;
