//! The agent card served at `/.well-known/agent-card.json`.
//!
//! One "hybrid" document serves 1.0 and 0.3 clients at once, as the official SDKs do:
//! the 1.0 fields (`supportedInterfaces` listing JSON-RPC and HTTP+JSON for both
//! versions, in preference order) plus the 0.3 top-level fields (`protocolVersion`,
//! `url`, `preferredTransport`, `additionalInterfaces`,
//! `supportsAuthenticatedExtendedCard`), which 1.0 clients ignore. The capabilities say
//! exactly what is served: streaming always, push notifications when `push.enabled`,
//! the extended card when callers authenticate.
//!
//! Security: API keys are declared as a bearer scheme and an `X-API-Key` scheme, and each
//! OIDC issuer as an OpenID Connect scheme (`oidc-1`, `oidc-2`, … in configuration
//! order) pointing at its discovery document; `securityRequirements` lists each scheme
//! as an alternative (any one suffices). With the 0.3 fields on, every scheme also
//! carries its 0.3 fields (`type`, …) and the 0.3 `security` lists the same
//! alternatives, as a2a-python's hybrid card does.
//!
//! Skills' tools are not part of A2A; their input schemas are published through the
//! `urn:agent-a2a:tool-schemas:v1` extension so a client can call a tool directly with a
//! data part `{"tool": name, "arguments": {...}}`.

use serde_json::{Map, Value, json};

/// URI of the extension that publishes tool input schemas.
pub const TOOL_SCHEMAS_EXTENSION: &str = "urn:agent-a2a:tool-schemas:v1";

/// What the card says about this deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct CardConfig {
    /// Human-readable agent name.
    pub name: String,
    /// What the agent is for.
    pub description: String,
    /// The agent's own version, not the protocol's.
    pub version: String,
    /// Public base URL without a trailing slash, e.g. `http://127.0.0.1:8080`.
    pub base_url: String,
    /// `(organization, url)`.
    pub provider: Option<(String, String)>,
    pub documentation_url: Option<String>,
    /// Media types the agent accepts (`defaultInputModes`).
    pub input_modes: Vec<String>,
    /// Also write the 0.3 top-level fields (`protocolVersion`, `url`,
    /// `preferredTransport`, `additionalInterfaces`, `supportsAuthenticatedExtendedCard`,
    /// `capabilities.stateTransitionHistory`) so 0.3 clients can read the card. Strict 1.0
    /// schema validators reject them, so a 1.0-only deployment turns them off.
    pub v03_fields: bool,
    /// Media types the agent produces (`defaultOutputModes`).
    pub output_modes: Vec<String>,
    /// Requests need an API key: declare the bearer and `X-API-Key` schemes.
    pub api_keys: bool,
    /// OIDC issuers whose bearer tokens are accepted: one OpenID Connect scheme each.
    pub oidc_issuers: Vec<String>,
    /// `host:port` of the gRPC binding, when it is on: the card lists a 1.0 `GRPC`
    /// interface after the HTTP ones.
    pub grpc_url: Option<String>,
    /// Callers authenticate: they can get the extended card (`GetExtendedAgentCard`).
    pub extended_card: bool,
    /// Push-notification configs are served and delivered (`push.enabled`).
    pub push_notifications: bool,
}

/// URI of the extension through which the extended card tells a caller its own terms.
pub const TENANT_EXTENSION: &str = "urn:agent-a2a:tenant:v1";

/// What the extended card tells an authenticated caller about its own terms.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantTerms {
    pub tenant: String,
    /// Its rate-limit tier, and that tier's requests per minute.
    pub tier: String,
    pub requests_per_minute: u32,
    /// Direct tool calls per minute, by skill id, for the skills that have a budget.
    pub skill_calls_per_minute: Vec<(String, u32)>,
}

/// A skill as the card advertises it.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillCard {
    /// Stable id; also the key of the skill's tools in the tool-schemas extension.
    pub id: String,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    /// Example prompts (omitted from the card when empty).
    pub examples: Vec<String>,
    /// Tools callable directly; their schemas go into the tool-schemas extension.
    pub tools: Vec<ToolCard>,
}

/// A tool of a skill, with the JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCard {
    pub name: String,
    pub description: String,
    /// JSON Schema of the tool's `arguments`.
    pub input_schema: Value,
    /// JSON Schema of the tool's result.
    pub output_schema: Value,
}

/// Builds the hybrid 1.0 + 0.3 agent card.
pub fn build_agent_card(cfg: &CardConfig, skills: &[SkillCard]) -> Value {
    let base = cfg.base_url.trim_end_matches('/');
    let rpc_url = format!("{base}/");
    let interface = |url: &str, binding: &str, version: &str| json!({"url": url, "protocolBinding": binding, "protocolVersion": version});

    let mut card = Map::new();
    card.insert("name".into(), json!(cfg.name));
    card.insert("description".into(), json!(cfg.description));
    card.insert("version".into(), json!(cfg.version));
    let mut interfaces = vec![
        interface(&rpc_url, "JSONRPC", "1.0"),
        interface(base, "HTTP+JSON", "1.0"),
    ];
    if let Some(grpc) = &cfg.grpc_url {
        interfaces.push(interface(grpc, "GRPC", "1.0"));
    }
    interfaces.extend([
        interface(&rpc_url, "JSONRPC", "0.3"),
        interface(base, "HTTP+JSON", "0.3"),
    ]);
    card.insert("supportedInterfaces".into(), Value::Array(interfaces));
    if let Some((organization, url)) = &cfg.provider {
        card.insert(
            "provider".into(),
            json!({"organization": organization, "url": url}),
        );
    }
    if let Some(url) = &cfg.documentation_url {
        card.insert("documentationUrl".into(), json!(url));
    }
    card.insert("capabilities".into(), capabilities(skills, cfg));
    let schemes = security_schemes(cfg);
    if !schemes.is_empty() {
        // Any one scheme suffices (OpenAPI "any entry" semantics).
        let requirements: Vec<Value> = schemes
            .iter()
            .map(|(name, _)| json!({"schemes": {name.as_str(): {"list": []}}}))
            .collect();
        if cfg.v03_fields {
            let security: Vec<Value> = schemes
                .iter()
                .map(|(name, _)| json!({name.as_str(): []}))
                .collect();
            card.insert("security".into(), Value::Array(security));
        }
        card.insert(
            "securitySchemes".into(),
            Value::Object(schemes.into_iter().collect()),
        );
        card.insert("securityRequirements".into(), Value::Array(requirements));
    }
    card.insert("defaultInputModes".into(), json!(cfg.input_modes));
    card.insert("defaultOutputModes".into(), json!(cfg.output_modes));
    card.insert(
        "skills".into(),
        Value::Array(skills.iter().map(skill).collect()),
    );

    if !cfg.v03_fields {
        return Value::Object(card);
    }
    // 0.3 view of the same endpoints.
    card.insert("protocolVersion".into(), json!("0.3.0"));
    card.insert("url".into(), json!(rpc_url));
    card.insert("preferredTransport".into(), json!("JSONRPC"));
    card.insert(
        "additionalInterfaces".into(),
        json!([
            {"url": rpc_url, "transport": "JSONRPC"},
            {"url": base, "transport": "HTTP+JSON"},
        ]),
    );
    card.insert(
        "supportsAuthenticatedExtendedCard".into(),
        json!(cfg.extended_card),
    );
    Value::Object(card)
}

/// The declared schemes by name, in the order of `securityRequirements`. Each is the 1.0
/// wrapped form, plus the 0.3 flat fields when the card carries 0.3 fields.
fn security_schemes(cfg: &CardConfig) -> Vec<(String, Value)> {
    let mut schemes = Vec::new();
    let mut scheme = |name: String, wrapper: &str, v1: Value, v03: Value| {
        let mut entry = Map::new();
        entry.insert(wrapper.to_owned(), v1);
        if let (true, Value::Object(flat)) = (cfg.v03_fields, v03) {
            entry.extend(flat);
        }
        schemes.push((name, Value::Object(entry)));
    };
    if cfg.api_keys {
        // Either scheme carries the same key.
        let bearer = "An API key issued by the operator, as a bearer token.";
        scheme(
            "bearer".into(),
            "httpAuthSecurityScheme",
            json!({"scheme": "Bearer", "description": bearer}),
            // The 0.3 `scheme` as the 1.0 one: a client that maps the 0.3 fields onto the
            // 1.0 ones (the official SDKs do) reads the same scheme, and the signed card
            // verifies for it.
            json!({"type": "http", "scheme": "Bearer", "description": bearer}),
        );
        let api_key = "The same API key in the X-API-Key header.";
        scheme(
            "apiKey".into(),
            "apiKeySecurityScheme",
            json!({"location": "header", "name": "X-API-Key", "description": api_key}),
            json!({"type": "apiKey", "in": "header", "name": "X-API-Key", "description": api_key}),
        );
    }
    for (i, issuer) in cfg.oidc_issuers.iter().enumerate() {
        let url = format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        );
        let description =
            format!("An access token (JWT) of {issuer}, as \"Authorization: Bearer <token>\".");
        scheme(
            format!("oidc-{}", i + 1),
            "openIdConnectSecurityScheme",
            json!({"openIdConnectUrl": url, "description": description}),
            json!({"type": "openIdConnect", "openIdConnectUrl": url, "description": description}),
        );
    }
    schemes
}

/// The extended card of an authenticated caller: the public card (every skill and tool
/// is open to every tenant) plus the caller's own terms in the
/// `urn:agent-a2a:tenant:v1` extension.
pub fn extended_agent_card(public: &Value, terms: &TenantTerms) -> Value {
    let mut card = public.clone();
    let budgets: Map<String, Value> = terms
        .skill_calls_per_minute
        .iter()
        .map(|(skill, n)| (skill.clone(), json!(n)))
        .collect();
    let extension = json!({
        "uri": TENANT_EXTENSION,
        "description": "The caller's tenant and rate-limit tier: requests per minute, and \
                        direct tool calls per minute for the skills that have a budget",
        "required": false,
        "params": {
            "tenant": terms.tenant,
            "tier": terms.tier,
            "requestsPerMinute": terms.requests_per_minute,
            "skillCallsPerMinute": budgets,
        },
    });
    if let Some(caps) = card.get_mut("capabilities").and_then(Value::as_object_mut) {
        match caps.get_mut("extensions").and_then(Value::as_array_mut) {
            Some(extensions) => extensions.push(extension),
            None => {
                caps.insert("extensions".into(), Value::Array(vec![extension]));
            }
        }
    }
    card
}

fn capabilities(skills: &[SkillCard], cfg: &CardConfig) -> Value {
    let (v03_fields, extended_card) = (cfg.v03_fields, cfg.extended_card);
    let mut extensions = Vec::new();
    let with_tools: Map<String, Value> = skills
        .iter()
        .filter(|s| !s.tools.is_empty())
        .map(|s| {
            let tools: Vec<Value> = s
                .tools
                .iter()
                .map(|t| {
                    json!({"name": t.name, "description": t.description, "inputSchema": t.input_schema, "outputSchema": t.output_schema})
                })
                .collect();
            (s.id.clone(), Value::Array(tools))
        })
        .collect();
    if !with_tools.is_empty() {
        extensions.push(json!({
            "uri": TOOL_SCHEMAS_EXTENSION,
            "description": "Input and output JSON Schemas of each skill's tools; call a tool directly \
                            with a data part {\"tool\": name, \"arguments\": {...}}",
            "required": false,
            "params": {"skills": with_tools},
        }));
    }
    extensions.push(json!({
        "uri": super::generations::GENERATIONS_EXTENSION,
        "description": "Task generations (the A2A 1.1 draft): Task.generation on tasks and \
                        update events, GetTask long-poll with currentGeneration, and \
                        SendMessageConfiguration.ifGenerationMatch (TaskGenerationMismatchError, \
                        -32010). Activate per request with the A2A-Extensions header (1.0 \
                        JSON-RPC and HTTP+JSON).",
        "required": false,
    }));
    let mut caps = json!({
        "streaming": true,
        "pushNotifications": cfg.push_notifications,
        "extendedAgentCard": extended_card,
    });
    if v03_fields {
        caps["stateTransitionHistory"] = json!(true);
    }
    if !extensions.is_empty() {
        caps["extensions"] = Value::Array(extensions);
    }
    caps
}

fn skill(s: &SkillCard) -> Value {
    let mut out = Map::new();
    out.insert("id".into(), json!(s.id));
    out.insert("name".into(), json!(s.name));
    out.insert("description".into(), json!(s.description));
    out.insert("tags".into(), json!(s.tags));
    if !s.examples.is_empty() {
        out.insert("examples".into(), json!(s.examples));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CardConfig {
        CardConfig {
            name: "agent-a2a".into(),
            description: "A durable A2A agent".into(),
            version: "0.1.0".into(),
            base_url: "http://127.0.0.1:8080".into(),
            provider: Some(("Example Org".into(), "https://example.org".into())),
            documentation_url: None,
            input_modes: vec!["text/plain".into(), "application/json".into()],
            output_modes: vec!["text/plain".into()],
            v03_fields: true,
            api_keys: false,
            oidc_issuers: Vec::new(),
            grpc_url: None,
            extended_card: false,
            push_notifications: false,
        }
    }

    #[test]
    fn the_extended_card_is_the_public_one_with_the_callers_terms() {
        let cfg = CardConfig {
            extended_card: true,
            push_notifications: true,
            ..config()
        };
        let public = build_agent_card(&cfg, &[]);
        assert_eq!(public["capabilities"]["extendedAgentCard"], true);
        assert_eq!(public["supportsAuthenticatedExtendedCard"], true);
        let terms = TenantTerms {
            tenant: "acme".into(),
            tier: "pro".into(),
            requests_per_minute: 600,
            skill_calls_per_minute: vec![("memory".into(), 30)],
        };
        let extended = extended_agent_card(&public, &terms);
        let extensions = extended["capabilities"]["extensions"].as_array().unwrap();
        let tenant = extensions
            .iter()
            .find(|e| e["uri"] == TENANT_EXTENSION)
            .expect("the tenant extension");
        assert_eq!(tenant["params"]["tenant"], "acme");
        assert_eq!(tenant["params"]["tier"], "pro");
        assert_eq!(tenant["params"]["requestsPerMinute"], 600);
        assert_eq!(tenant["params"]["skillCallsPerMinute"]["memory"], 30);
        // Everything else is the public card.
        let mut without = extended.clone();
        without["capabilities"]["extensions"]
            .as_array_mut()
            .unwrap()
            .retain(|e| e["uri"] != TENANT_EXTENSION);
        assert_eq!(without, public);
    }

    #[test]
    fn the_grpc_interface_is_listed_only_when_the_binding_is_on() {
        let bindings = |card: &Value| -> Vec<(String, String)> {
            card["supportedInterfaces"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| {
                    let s = |k: &str| i[k].as_str().unwrap().to_owned();
                    (s("protocolBinding"), s("protocolVersion"))
                })
                .collect()
        };
        let off = build_agent_card(&config(), &[]);
        assert!(!bindings(&off).iter().any(|(b, _)| b == "GRPC"));
        let cfg = CardConfig {
            grpc_url: Some("127.0.0.1:8081".into()),
            ..config()
        };
        let on = build_agent_card(&cfg, &[]);
        let grpc: Vec<&Value> = on["supportedInterfaces"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["protocolBinding"] == "GRPC")
            .collect();
        assert_eq!(grpc.len(), 1);
        assert_eq!(grpc[0]["url"], "127.0.0.1:8081");
        assert_eq!(grpc[0]["protocolVersion"], "1.0");
        // The 0.3 view names only what 0.3 clients can reach: 1.0 gRPC is another package.
        assert!(
            on["additionalInterfaces"]
                .as_array()
                .unwrap()
                .iter()
                .all(|i| i["transport"] != "GRPC")
        );
    }

    #[test]
    fn the_card_declares_api_keys_only_when_they_are_required() {
        let open = build_agent_card(&config(), &[]);
        assert!(open.get("securitySchemes").is_none());
        assert!(open.get("securityRequirements").is_none());
        let cfg = CardConfig {
            api_keys: true,
            ..config()
        };
        let card = build_agent_card(&cfg, &[]);
        assert_eq!(
            card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
            "Bearer"
        );
        let key = &card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"];
        assert_eq!(
            (key["location"].as_str(), key["name"].as_str()),
            (Some("header"), Some("X-API-Key"))
        );
        assert_eq!(
            card["securityRequirements"][0]["schemes"]["bearer"]["list"],
            json!([])
        );
        // The 0.3 view of the same schemes.
        assert_eq!(card["securitySchemes"]["bearer"]["type"], "http");
        assert_eq!(card["securitySchemes"]["apiKey"]["in"], "header");
        assert_eq!(card["security"], json!([{"bearer": []}, {"apiKey": []}]));
    }

    #[test]
    fn each_oidc_issuer_is_an_alternative_openid_connect_scheme() {
        let cfg = CardConfig {
            api_keys: true,
            oidc_issuers: vec![
                "https://login.example.com/".into(),
                "https://id.example.org/realms/a2a".into(),
            ],
            ..config()
        };
        let card = build_agent_card(&cfg, &[]);
        let first = &card["securitySchemes"]["oidc-1"];
        assert_eq!(
            first["openIdConnectSecurityScheme"]["openIdConnectUrl"],
            "https://login.example.com/.well-known/openid-configuration"
        );
        assert_eq!(
            card["securitySchemes"]["oidc-2"]["openIdConnectSecurityScheme"]["openIdConnectUrl"],
            "https://id.example.org/realms/a2a/.well-known/openid-configuration"
        );
        let alternatives: Vec<Vec<&String>> = card["securityRequirements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["schemes"].as_object().unwrap().keys().collect())
            .collect();
        assert_eq!(
            alternatives,
            [["bearer"], ["apiKey"], ["oidc-1"], ["oidc-2"]]
        );
        // 0.3: flat fields beside the wrapper, and `security` with the same alternatives.
        assert_eq!(first["type"], "openIdConnect");
        assert_eq!(
            first["openIdConnectUrl"],
            first["openIdConnectSecurityScheme"]["openIdConnectUrl"]
        );
        assert_eq!(card["security"][3], json!({"oidc-2": []}));

        // Tokens only, and a 1.0-only card: no API-key schemes, no 0.3 fields.
        let cfg = CardConfig {
            api_keys: false,
            v03_fields: false,
            ..cfg
        };
        let card = build_agent_card(&cfg, &[]);
        let schemes = card["securitySchemes"].as_object().unwrap();
        assert_eq!(schemes.keys().collect::<Vec<_>>(), ["oidc-1", "oidc-2"]);
        assert_eq!(
            schemes["oidc-1"]
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            ["openIdConnectSecurityScheme"]
        );
        assert!(card.get("security").is_none());
        assert_eq!(card["securityRequirements"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_1_0_only_card_has_no_0_3_fields_but_keeps_every_interface() {
        let cfg = CardConfig {
            v03_fields: false,
            ..config()
        };
        let card = build_agent_card(&cfg, &[memory_skill()]);
        for key in [
            "protocolVersion",
            "url",
            "preferredTransport",
            "additionalInterfaces",
            "supportsAuthenticatedExtendedCard",
        ] {
            assert!(card.get(key).is_none(), "{key} present");
        }
        assert!(card["capabilities"].get("stateTransitionHistory").is_none());
        assert_eq!(card["supportedInterfaces"].as_array().unwrap().len(), 4);
    }

    fn memory_skill() -> SkillCard {
        SkillCard {
            id: "memory".into(),
            name: "Memory".into(),
            description: "Remembers things".into(),
            tags: vec!["memory".into()],
            examples: vec!["remember that I like tea".into()],
            tools: vec![ToolCard {
                name: "remember".into(),
                description: "Store a fact".into(),
                input_schema: json!({"type": "object", "properties": {"fact": {"type": "string"}}}),
                output_schema: json!({"type": "object"}),
            }],
        }
    }

    #[test]
    fn capabilities_say_what_is_implemented() {
        let card = build_agent_card(&config(), &[memory_skill()]);
        let caps = &card["capabilities"];
        assert_eq!(caps["streaming"], true);
        assert_eq!(caps["pushNotifications"], false);
        assert_eq!(caps["extendedAgentCard"], false);
        assert_eq!(caps["stateTransitionHistory"], true);
        assert_eq!(card["supportsAuthenticatedExtendedCard"], false);
    }

    #[test]
    fn four_interfaces_in_preference_order() {
        let card = build_agent_card(&config(), &[]);
        let got: Vec<(String, String, String)> = card["supportedInterfaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let s = |k: &str| i[k].as_str().unwrap().to_owned();
                (s("url"), s("protocolBinding"), s("protocolVersion"))
            })
            .collect();
        let want = |u: &str, b: &str, v: &str| (u.to_owned(), b.to_owned(), v.to_owned());
        assert_eq!(
            got,
            vec![
                want("http://127.0.0.1:8080/", "JSONRPC", "1.0"),
                want("http://127.0.0.1:8080", "HTTP+JSON", "1.0"),
                want("http://127.0.0.1:8080/", "JSONRPC", "0.3"),
                want("http://127.0.0.1:8080", "HTTP+JSON", "0.3"),
            ]
        );
    }

    #[test]
    fn the_0_3_fields_are_present() {
        let card = build_agent_card(&config(), &[]);
        assert_eq!(card["protocolVersion"], "0.3.0");
        assert_eq!(card["url"], "http://127.0.0.1:8080/");
        assert_eq!(card["preferredTransport"], "JSONRPC");
        assert_eq!(card["additionalInterfaces"][1]["transport"], "HTTP+JSON");
    }

    #[test]
    fn tool_schemas_are_published_in_the_extension() {
        let card = build_agent_card(&config(), &[memory_skill()]);
        let ext = &card["capabilities"]["extensions"][0];
        assert_eq!(ext["uri"], TOOL_SCHEMAS_EXTENSION);
        assert_eq!(ext["required"], false);
        let tool = &ext["params"]["skills"]["memory"][0];
        assert_eq!(tool["name"], "remember");
        assert_eq!(tool["inputSchema"]["properties"]["fact"]["type"], "string");
        assert_eq!(tool["outputSchema"]["type"], "object");
    }

    #[test]
    fn no_tool_extension_without_tools_and_optional_fields_omitted() {
        let mut skill = memory_skill();
        skill.tools.clear();
        skill.examples.clear();
        let mut cfg = config();
        cfg.provider = None;
        cfg.base_url.push('/');
        let card = build_agent_card(&cfg, &[skill]);
        let uris: Vec<&Value> = card["capabilities"]["extensions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["uri"])
            .collect();
        assert_eq!(uris, [super::super::generations::GENERATIONS_EXTENSION]);
        assert!(card.get("provider").is_none());
        assert!(card.get("documentationUrl").is_none());
        assert!(card["skills"][0].get("examples").is_none());
        assert_eq!(
            card["url"], "http://127.0.0.1:8080/",
            "trailing slash not doubled"
        );
    }

    #[test]
    fn required_1_0_fields_are_present() {
        let card = build_agent_card(&config(), &[memory_skill()]);
        for key in [
            "name",
            "description",
            "version",
            "supportedInterfaces",
            "capabilities",
            "defaultInputModes",
            "defaultOutputModes",
            "skills",
        ] {
            assert!(card.get(key).is_some(), "{key}");
        }
        assert_eq!(card["provider"]["organization"], "Example Org");
        assert_eq!(card["skills"][0]["tags"], json!(["memory"]));
    }
}
