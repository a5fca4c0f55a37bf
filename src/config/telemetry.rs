//! `[telemetry]`: OpenTelemetry traces exported over OTLP/HTTP (protobuf). Off unless
//! `otlp_endpoint` is set; with it off no span is created at all.

use serde::{Deserialize, Serialize};

use super::ConfigError;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySettings {
    /// Base URL of an OTLP/HTTP collector (`http://127.0.0.1:4318`); spans go to
    /// `<otlp_endpoint>/v1/traces`. Empty: no traces.
    pub otlp_endpoint: String,
    /// Share of new traces recorded, 0.0 to 1.0; a request carrying a `traceparent`
    /// follows its caller's decision instead.
    pub sampling_ratio: f64,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Spans waiting for export at most; past it new spans are dropped (the SDK logs it).
    pub max_queue_spans: usize,
    /// Spans per export request at most.
    pub max_export_batch: usize,
    /// How long ended spans wait before a batch is exported, in milliseconds.
    pub export_delay_ms: u64,
    /// One export request's time limit, in milliseconds.
    pub export_timeout_ms: u64,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            otlp_endpoint: String::new(),
            sampling_ratio: 1.0,
            service_name: "agent-a2a".into(),
            max_queue_spans: 2048,
            max_export_batch: 512,
            export_delay_ms: 5000,
            export_timeout_ms: 10_000,
        }
    }
}

impl TelemetrySettings {
    /// Whether traces are exported.
    pub fn enabled(&self) -> bool {
        !self.otlp_endpoint.trim().is_empty()
    }

    /// The OTLP/HTTP traces URL.
    pub fn traces_url(&self) -> String {
        format!(
            "{}/v1/traces",
            self.otlp_endpoint.trim().trim_end_matches('/')
        )
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &'static str, problem: String| Err(ConfigError::Key { key, problem });
        let endpoint = self.otlp_endpoint.trim();
        if !endpoint.is_empty() {
            let scheme_ok = ["http://", "https://"]
                .iter()
                .any(|s| endpoint.len() > s.len() && endpoint.starts_with(s));
            if !scheme_ok || endpoint.contains(char::is_whitespace) {
                return bad(
                    "telemetry.otlp_endpoint",
                    format!("{endpoint:?} is not an http:// or https:// URL"),
                );
            }
        }
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return bad(
                "telemetry.sampling_ratio",
                format!("must be between 0.0 and 1.0, not {}", self.sampling_ratio),
            );
        }
        if self.service_name.trim().is_empty() {
            return bad("telemetry.service_name", "must not be empty".into());
        }
        if self.max_queue_spans == 0 {
            return bad("telemetry.max_queue_spans", "must be greater than 0".into());
        }
        if self.max_export_batch == 0 || self.max_export_batch > self.max_queue_spans {
            return bad(
                "telemetry.max_export_batch",
                format!(
                    "must be between 1 and telemetry.max_queue_spans ({})",
                    self.max_queue_spans
                ),
            );
        }
        if self.export_delay_ms == 0 {
            return bad("telemetry.export_delay_ms", "must be greater than 0".into());
        }
        if self.export_timeout_ms == 0 {
            return bad(
                "telemetry.export_timeout_ms",
                "must be greater than 0".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(tweak: impl FnOnce(&mut TelemetrySettings)) -> String {
        let mut settings = TelemetrySettings {
            otlp_endpoint: "http://127.0.0.1:4318".into(),
            ..TelemetrySettings::default()
        };
        tweak(&mut settings);
        match settings.validate() {
            Err(e) => e.to_string(),
            Ok(()) => panic!("accepted {settings:?}"),
        }
    }

    #[test]
    fn defaults_are_valid_and_off() {
        let settings = TelemetrySettings::default();
        assert!(settings.validate().is_ok());
        assert!(!settings.enabled());
    }

    #[test]
    fn the_traces_url_is_under_the_base() {
        let settings = TelemetrySettings {
            otlp_endpoint: "http://collector:4318/".into(),
            ..TelemetrySettings::default()
        };
        assert!(settings.enabled());
        assert_eq!(settings.traces_url(), "http://collector:4318/v1/traces");
    }

    #[test]
    fn every_bound_is_refused_with_its_key() {
        type Tweak = Box<dyn FnOnce(&mut TelemetrySettings)>;
        let cases: Vec<(&str, Tweak)> = vec![
            (
                "telemetry.otlp_endpoint",
                Box::new(|s| s.otlp_endpoint = "collector:4318".into()),
            ),
            (
                "telemetry.otlp_endpoint",
                Box::new(|s| s.otlp_endpoint = "http://".into()),
            ),
            (
                "telemetry.sampling_ratio",
                Box::new(|s| s.sampling_ratio = 1.5),
            ),
            (
                "telemetry.sampling_ratio",
                Box::new(|s| s.sampling_ratio = -0.1),
            ),
            (
                "telemetry.sampling_ratio",
                Box::new(|s| s.sampling_ratio = f64::NAN),
            ),
            (
                "telemetry.service_name",
                Box::new(|s| s.service_name = " ".into()),
            ),
            (
                "telemetry.max_queue_spans",
                Box::new(|s| s.max_queue_spans = 0),
            ),
            (
                "telemetry.max_export_batch",
                Box::new(|s| s.max_export_batch = 0),
            ),
            (
                "telemetry.max_export_batch",
                Box::new(|s| s.max_export_batch = 4096),
            ),
            (
                "telemetry.export_delay_ms",
                Box::new(|s| s.export_delay_ms = 0),
            ),
            (
                "telemetry.export_timeout_ms",
                Box::new(|s| s.export_timeout_ms = 0),
            ),
        ];
        for (key, tweak) in cases {
            let message = refused(tweak);
            assert!(message.contains(key), "{key}: {message}");
        }
    }
}
