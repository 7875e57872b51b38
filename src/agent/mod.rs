pub mod core;
pub mod tools;
