//! Tasks as documents (issue 30): `create-tasks` writes one task document per task of the
//! agent's structured answer ([`create`]), `implement-tasks` queues one job per task in
//! dependency order ([`fanout`]), and a task follows its job ([`done`]).

pub mod create;
pub mod done;
pub mod edit;
pub mod fanout;
pub mod graph;
pub mod integrate;
pub mod listing;
pub mod parse;

pub use fanout::{IMPLEMENT_TASK, TASK_KEY, fan_out, task_job_id};
pub use integrate::INTEGRATE;
pub use parse::FORMAT_REQUEST;
