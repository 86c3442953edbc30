//! A Gemini API stand-in built on Google's own `google-genai` SDK types
//! (`e2e/python/gemini_asgi_app.py`), served by uvicorn: every request body the gateway sends
//! is validated against the SDK's types and every answer is built from them. The app records
//! each request (path, query, headers, body, and why it was refused if it was).

use std::ops::Deref;

use super::recorded::RecordedApp;

/// The running app, stopped on drop.
pub struct GeminiMock(RecordedApp);

impl GeminiMock {
    /// Starts the app, accepting only `api_key` in `x-goog-api-key`.
    pub fn start(api_key: &str) -> GeminiMock {
        GeminiMock(RecordedApp::start(
            "gemini mock (uvicorn)",
            "gemini_asgi_app",
            "GEMINI_RECORD",
            &[("GEMINI_API_KEY", api_key)],
        ))
    }

    /// The provider `api_base`: `http://127.0.0.1:PORT/v1beta`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1beta", self.0.addr)
    }
}

impl Deref for GeminiMock {
    type Target = RecordedApp;

    fn deref(&self) -> &RecordedApp {
        &self.0
    }
}
