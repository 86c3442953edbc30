//! Providers: how a routed request reaches a model. `openai` speaks HTTP to any
//! OpenAI-compatible server; `mock` answers locally, for demos and tests.

pub(crate) mod mock;
pub(crate) mod openai;
