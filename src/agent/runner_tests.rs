//! The agent loop and `run_and_collect` (seed 000 "Agent hallucination retry in
//! RunAndCollect", "Tool Adapter", "Agent Initialization"), over scripted providers.

use std::sync::Mutex;

use serde_json::json;

use super::*;
use crate::config::AgentSettings;
use crate::providers::{ProviderError, ProviderEvent, Role, ScriptedProvider, ToolCallFragment};

fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("the {name} tool"),
        input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        output_schema: json!({"type": "object"}),
    }
}

/// Counts calls per tool; `slow` sleeps past any test timeout, `broken` fails.
#[derive(Default)]
struct Tools {
    calls: Mutex<Vec<(String, Map<String, Value>)>>,
}

#[async_trait]
impl ToolInvoker for Tools {
    async fn invoke(&self, call: &FunctionCall) -> Result<Value, String> {
        let (name, args) = (call.name.as_str(), &call.args);
        if let Ok(mut calls) = self.calls.lock() {
            calls.push((name.to_owned(), args.clone()));
        }
        match name {
            "slow" => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(json!("late"))
            }
            "broken" => Err("invalid arguments: q: required".into()),
            "scalar" => Ok(json!(42)),
            _ => Ok(
                json!({"answer": format!("{name} says {}", args.get("q").unwrap_or(&Value::Null))}),
            ),
        }
    }
}

impl Tools {
    fn count(&self) -> usize {
        self.calls.lock().map(|c| c.len()).unwrap_or_default()
    }
}

#[derive(Default)]
struct Recorder {
    events: Vec<Event>,
}

#[async_trait]
impl RunObserver for Recorder {
    async fn on_event(&mut self, event: &Event) -> Result<(), crate::error::Error> {
        self.events.push(event.clone());
        Ok(())
    }
}

impl Recorder {
    fn complete(&self) -> Vec<&Event> {
        self.events.iter().filter(|e| !e.partial).collect()
    }
}

fn text(t: &str) -> ProviderEvent {
    ProviderEvent::TextDelta(t.into())
}

fn call(index: usize, id: &str, name: &str, args: &str) -> ProviderEvent {
    ProviderEvent::ToolCallFragment(ToolCallFragment {
        index: Some(index),
        id: Some(id.into()),
        name: Some(name.into()),
        arguments: args.into(),
    })
}

fn answer(events: Vec<ProviderEvent>) -> Result<Vec<ProviderEvent>, ProviderError> {
    let mut events = events;
    events.push(ProviderEvent::Done);
    Ok(events)
}

fn settings(sub_agents: &[&str]) -> AgentSettings {
    AgentSettings {
        name: "root".into(),
        instruction: "Be brief.".into(),
        provider: "p".into(),
        tools: vec!["*".into()],
        sub_agents: sub_agents
            .iter()
            .map(|name| SubAgentSettings {
                name: (*name).into(),
                description: format!("{name} things"),
                instruction: format!("You are {name}."),
                provider: String::new(),
                model: String::new(),
                tools: Vec::new(),
                sub_agents: Vec::new(),
                remote: String::new(),
            })
            .collect(),
        ..AgentSettings::default()
    }
}

struct Setup {
    provider: Arc<ScriptedProvider>,
    tools: Arc<Tools>,
    runner: Runner,
}

fn setup(
    scripts: Vec<Result<Vec<ProviderEvent>, ProviderError>>,
    sub_agents: &[&str],
    max_turns: u32,
) -> Setup {
    let provider = Arc::new(ScriptedProvider::new("p", "m", scripts));
    let adapter = ModelAdapter::new(provider.clone());
    let specs = vec![spec("lookup"), spec("slow"), spec("broken"), spec("scalar")];
    let tree = AgentTree::build(
        &settings(sub_agents),
        &|name| (name == "p").then(|| adapter.clone()),
        &specs,
    )
    .unwrap();
    let tools = Arc::new(Tools::default());
    let runner = Runner::new(
        Arc::new(tree),
        tools.clone(),
        RunSettings {
            max_turns,
            tool_timeout: Duration::from_millis(200),
            max_output_tokens: 0,
            stream: true,
        },
    );
    Setup {
        provider,
        tools,
        runner,
    }
}

fn user(text: &str) -> Vec<Content> {
    vec![Content {
        role: "user".into(),
        parts: vec![Part::Text(text.into())],
    }]
}

fn responses(recorder: &Recorder) -> Vec<Map<String, Value>> {
    recorder
        .complete()
        .iter()
        .flat_map(|e| e.content.iter().flat_map(|c| c.parts.iter()))
        .filter_map(|p| match p {
            Part::FunctionResponse(r) => Some(r.response.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn agent_initialization() {
    let s = setup(vec![], &["billing"], 4);
    let tree = s.runner.tree();
    assert_eq!(tree.root().name, "root");
    assert_eq!(tree.root().model.name(), "m");
    let tools: Vec<&str> = tree.root().tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["lookup", "slow", "broken", "scalar"]);
    assert_eq!(tree.root_sub_agent_names(), ["billing"]);
    let billing = tree.node(tree.find("billing").unwrap());
    assert!(billing.tools.is_empty());
    assert_eq!(
        tree.transfer_targets(tree.find("billing").unwrap()),
        ["root"]
    );
}

#[test]
fn a_tree_retooled_takes_the_tools_its_agents_name_from_the_new_list() {
    let provider = Arc::new(ScriptedProvider::new("p", "m", []));
    let adapter = ModelAdapter::new(provider);
    let mut settings = settings(&["billing"]);
    settings.sub_agents[0].tools = vec!["lookup".into(), "slow".into()];
    let tree = AgentTree::build(
        &settings,
        &|name| (name == "p").then(|| adapter.clone()),
        &[spec("lookup"), spec("slow")],
    )
    .unwrap();
    let names = |tree: &AgentTree, agent: &str| -> Vec<String> {
        let node = tree.node(tree.find(agent).unwrap());
        node.tools.iter().map(|t| t.name.clone()).collect()
    };
    // `slow` went away and `fresh` came: the root (`*`) takes all there are, billing
    // keeps what it named and still exists.
    let mut changed = spec("lookup");
    changed.description = "the lookup tool, changed".into();
    let retooled = tree.retooled(&[changed, spec("fresh")]);
    assert_eq!(names(&retooled, "root"), ["lookup", "fresh"]);
    assert_eq!(names(&retooled, "billing"), ["lookup"]);
    let billing = retooled.node(retooled.find("billing").unwrap());
    assert_eq!(billing.tools[0].description, "the lookup tool, changed");
    // Back again, it is offered again.
    let again = retooled.retooled(&[spec("lookup"), spec("slow")]);
    assert_eq!(names(&again, "billing"), ["lookup", "slow"]);
    assert_eq!(
        again.transfer_targets(again.find("billing").unwrap()),
        ["root"]
    );
}

#[test]
fn tree_errors_name_the_agent_and_the_problem() {
    let provider = Arc::new(ScriptedProvider::new("p", "m", []));
    let adapter = ModelAdapter::new(provider);
    let model = |name: &str| (name == "p").then(|| adapter.clone());
    let mut unknown_tool = settings(&[]);
    unknown_tool.tools = vec!["nope".into()];
    let e = AgentTree::build(&unknown_tool, &model, &[spec("lookup")]).unwrap_err();
    assert!(
        matches!(&e, TreeError::UnknownTool { tool, .. } if tool == "nope"),
        "{e}"
    );
    assert!(e.to_string().contains("lookup"), "{e}");

    let mut no_provider = settings(&[]);
    no_provider.provider = String::new();
    let e = AgentTree::build(&no_provider, &model, &[]).unwrap_err();
    assert_eq!(
        e,
        TreeError::NoProvider {
            agent: "root".into()
        }
    );

    let mut unknown_provider = settings(&[]);
    unknown_provider.provider = "q".into();
    let e = AgentTree::build(&unknown_provider, &model, &[]).unwrap_err();
    assert!(matches!(e, TreeError::UnknownProvider { .. }));

    let e = AgentTree::build(&settings(&["a", "a"]), &model, &[]).unwrap_err();
    assert_eq!(e, TreeError::DuplicateName("a".into()));
}

#[tokio::test]
async fn execute_legacy_tool() {
    // The model calls a skill tool; the adapter passes the parsed arguments through, the
    // result goes back to the model, and its answer ends the run.
    let s = setup(
        vec![
            answer(vec![call(0, "c1", "lookup", r#"{"q":"rust"}"#)]),
            answer(vec![text("Rust "), text("is fast.")]),
        ],
        &[],
        4,
    );
    let mut contents = user("what is rust?");
    let mut recorder = Recorder::default();
    s.runner
        .run(&mut contents, "", &mut recorder)
        .await
        .unwrap();

    let calls = s.tools.calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        vec![(
            "lookup".to_owned(),
            json!({"q": "rust"}).as_object().unwrap().clone()
        )]
    );
    assert_eq!(
        responses(&recorder),
        vec![
            json!({"answer": "lookup says \"rust\""})
                .as_object()
                .unwrap()
                .clone()
        ]
    );
    // Second request: the call and its response, ids paired.
    let second = &s.provider.requests()[1];
    let tool = second
        .messages
        .iter()
        .find(|m| m.role == Role::Tool)
        .unwrap();
    assert_eq!(tool.tool_call_id.as_deref(), Some("c1"));
    let assistant = second
        .messages
        .iter()
        .find(|m| m.role == Role::Assistant)
        .unwrap();
    assert_eq!(assistant.tool_calls[0].id, "c1");
    // Events: call (complete), response, two partials, the final answer.
    let complete = recorder.complete();
    assert_eq!(complete.len(), 3);
    assert_eq!(contents.len(), 4, "user, call, response, answer");
}

#[tokio::test]
async fn the_system_instruction_carries_the_session_context() {
    let s = setup(vec![answer(vec![text("ok")])], &["billing"], 4);
    let mut recorder = Recorder::default();
    s.runner
        .run(
            &mut user("hi"),
            "## Relevant memories\n- likes tea",
            &mut recorder,
        )
        .await
        .unwrap();
    let request = &s.provider.requests()[0];
    assert_eq!(request.messages[0].role, Role::System);
    let system = &request.messages[0].content;
    assert!(system.starts_with("Be brief.\n"), "{system}");
    assert!(system.contains("- billing: billing things"), "{system}");
    assert!(system.ends_with("- likes tea"), "{system}");
    let transfer = request
        .tools
        .iter()
        .find(|t| t.name == TRANSFER_TO_AGENT)
        .unwrap();
    assert_eq!(
        transfer.parameters["properties"]["agent_name"]["enum"],
        json!(["billing"])
    );
}

#[tokio::test]
async fn tool_failures_and_timeouts_become_error_responses() {
    let s = setup(
        vec![
            answer(vec![
                call(0, "a", "broken", "{}"),
                call(1, "b", "slow", "{}"),
                call(2, "c", "missing", "{}"),
                call(3, "d", "scalar", "{}"),
            ]),
            answer(vec![text("done")]),
        ],
        &[],
        4,
    );
    let mut recorder = Recorder::default();
    s.runner
        .run(&mut user("go"), "", &mut recorder)
        .await
        .unwrap();
    let got = responses(&recorder);
    assert_eq!(got[0]["error"], json!("invalid arguments: q: required"));
    assert_eq!(got[1]["error"], json!("tool slow timed out after 200 ms"));
    assert!(
        got[2]["error"]
            .as_str()
            .unwrap()
            .starts_with("unknown tool \"missing\"")
    );
    assert_eq!(got[3], json!({"result": 42}).as_object().unwrap().clone());
    assert_eq!(s.tools.count(), 3, "the unknown tool is never invoked");
}

#[tokio::test]
async fn the_turn_limit_ends_a_run_that_keeps_calling_tools() {
    let looping = || answer(vec![call(0, "", "lookup", r#"{"q":"again"}"#)]);
    let s = setup(vec![looping(), looping(), looping()], &[], 2);
    let mut recorder = Recorder::default();
    let e = s
        .runner
        .run(&mut user("go"), "", &mut recorder)
        .await
        .unwrap_err();
    assert!(matches!(e, RunError::TurnLimit(2)), "{e}");
    assert_eq!(s.tools.count(), 2);
    assert_eq!(s.provider.requests().len(), 2);
}

#[tokio::test]
async fn a_transfer_hands_the_conversation_to_the_sub_agent() {
    let s = setup(
        vec![
            answer(vec![call(
                0,
                "t1",
                TRANSFER_TO_AGENT,
                r#"{"agent_name":"billing"}"#,
            )]),
            answer(vec![text("Billing here.")]),
        ],
        &["billing"],
        4,
    );
    let mut recorder = Recorder::default();
    s.runner
        .run(&mut user("my invoice"), "", &mut recorder)
        .await
        .unwrap();
    let complete = recorder.complete();
    assert_eq!(
        complete[1].actions.transfer_to_agent.as_deref(),
        Some("billing")
    );
    assert_eq!(complete[2].author, "billing");
    let second = &s.provider.requests()[1];
    assert!(second.messages[0].content.starts_with("You are billing."));
    // The sub-agent may hand back to its parent, and has no tools of its own.
    let names: Vec<&str> = second.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, [TRANSFER_TO_AGENT]);
}

fn hallucinating() -> Result<Vec<ProviderEvent>, ProviderError> {
    answer(vec![call(
        0,
        "t1",
        TRANSFER_TO_AGENT,
        r#"{"agent_name":"ghost"}"#,
    )])
}

#[tokio::test]
async fn hallucinated_agent_name_triggers_retry() {
    let s = setup(
        vec![
            hallucinating(),
            answer(vec![text("Sorry, answering myself.")]),
        ],
        &["billing", "support"],
        4,
    );
    let mut recorder = Recorder::default();
    let mut contents = user("help");
    run_and_collect(&s.runner, &mut contents, "", &mut recorder)
        .await
        .unwrap();
    let requests = s.provider.requests();
    assert_eq!(requests.len(), 2, "exactly one retry");
    let correction = requests[1].messages.last().unwrap();
    assert_eq!(correction.role, Role::User);
    assert_eq!(
        correction.content,
        "[System: Agent \"ghost\" does not exist. Valid agents: billing, support. Please retry \
         using one of the valid agent names listed above.]"
    );
    // The failed call was answered before the correction, so the history stays well formed.
    let tool = &requests[1].messages[requests[1].messages.len() - 2];
    assert_eq!(tool.role, Role::Tool);
    assert!(
        tool.content.contains("failed to find agent: ghost"),
        "{}",
        tool.content
    );
    // The correction went through the observer (it is persisted like any input).
    assert!(recorder.events.iter().any(|e| e.author == "user"));
}

#[tokio::test]
async fn retry_succeeds() {
    let s = setup(
        vec![
            hallucinating(),
            answer(vec![text("Fixed "), text("answer.")]),
        ],
        &["billing"],
        4,
    );
    let text = run_and_collect(&s.runner, &mut user("help"), "", &mut Recorder::default())
        .await
        .unwrap();
    assert_eq!(text, "Fixed answer.");
}

#[tokio::test]
async fn retry_also_fails() {
    let s = setup(
        vec![
            hallucinating(),
            answer(vec![call(
                0,
                "t2",
                TRANSFER_TO_AGENT,
                r#"{"agent_name":"phantom"}"#,
            )]),
        ],
        &["billing"],
        4,
    );
    let e = run_and_collect(&s.runner, &mut user("help"), "", &mut Recorder::default())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "failed to find agent: phantom",
        "the retry's error"
    );
    assert_eq!(s.provider.requests().len(), 2);
}

#[tokio::test]
async fn non_hallucination_error_is_not_retried() {
    let s = setup(
        vec![Err(ProviderError::Timeout), answer(vec![text("never")])],
        &["billing"],
        4,
    );
    let e = run_and_collect(&s.runner, &mut user("help"), "", &mut Recorder::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            RunError::Model(AgentError::Provider(ProviderError::Timeout))
        ),
        "{e}"
    );
    assert_eq!(s.provider.requests().len(), 1);
}

#[tokio::test]
async fn no_sub_agents_means_no_retry() {
    // Without sub-agents no transfer is offered; a model that calls it anyway names an
    // agent that cannot exist, and the error is returned as it is.
    let s = setup(vec![hallucinating(), answer(vec![text("never")])], &[], 4);
    let e = run_and_collect(&s.runner, &mut user("help"), "", &mut Recorder::default())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "failed to find agent: ghost");
    assert_eq!(s.provider.requests().len(), 1);
}

#[tokio::test]
async fn streamed_text_is_collected_once_per_turn() {
    let s = setup(
        vec![
            answer(vec![text("Let me look. "), call(0, "c", "lookup", "{}")]),
            answer(vec![text("Found "), text("it.")]),
        ],
        &[],
        4,
    );
    let text = run_and_collect(&s.runner, &mut user("find"), "", &mut Recorder::default())
        .await
        .unwrap();
    assert_eq!(text, "Let me look. \n\nFound it.");
}

#[tokio::test]
async fn a_failing_observer_stops_the_run_before_tools_run() {
    struct Refusing;
    #[async_trait]
    impl RunObserver for Refusing {
        async fn on_event(&mut self, event: &Event) -> Result<(), crate::error::Error> {
            if event.partial {
                return Ok(());
            }
            Err(crate::error::Error::internal("store down"))
        }
    }
    let s = setup(vec![answer(vec![call(0, "c", "lookup", "{}")])], &[], 4);
    let e = s
        .runner
        .run(&mut user("go"), "", &mut Refusing)
        .await
        .unwrap_err();
    assert!(matches!(e, RunError::Observer(_)), "{e}");
    assert_eq!(
        s.tools.count(),
        0,
        "a call that was not persisted never runs"
    );
}

#[tokio::test]
async fn a_run_starts_with_the_agent_that_has_the_conversation() {
    let s = setup(vec![answer(vec![text("Billing again.")])], &["billing"], 4);
    let runner = s.runner.clone().starting_with(Some("billing"));
    let mut recorder = Recorder::default();
    runner
        .run(&mut user("and my refund?"), "", &mut recorder)
        .await
        .unwrap();
    assert_eq!(recorder.complete()[0].author, "billing");
    assert!(
        s.provider.requests()[0].messages[0]
            .content
            .starts_with("You are billing.")
    );
    // An agent that no longer exists starts at the root.
    let s = setup(vec![answer(vec![text("Root.")])], &[], 4);
    let runner = s.runner.clone().starting_with(Some("gone"));
    let mut recorder = Recorder::default();
    runner
        .run(&mut user("hi"), "", &mut recorder)
        .await
        .unwrap();
    assert_eq!(recorder.complete()[0].author, "root");
}

fn model_calls(calls: &[(&str, &str)]) -> Content {
    Content {
        role: "model".into(),
        parts: calls
            .iter()
            .map(|(id, name)| {
                Part::FunctionCall(FunctionCall {
                    id: (*id).into(),
                    name: (*name).into(),
                    args: json!({"q": id}).as_object().unwrap().clone(),
                })
            })
            .collect(),
    }
}

fn answered(id: &str, name: &str) -> Content {
    Content {
        role: "user".into(),
        parts: vec![Part::FunctionResponse(FunctionResponse {
            id: id.into(),
            name: name.into(),
            response: Map::new(),
        })],
    }
}

#[test]
fn unanswered_calls_are_those_of_the_last_response_without_an_answer_after_it() {
    let ids = |contents: &[Content]| -> Vec<String> {
        unanswered_calls(contents)
            .into_iter()
            .map(|c| c.id)
            .collect()
    };
    let mut contents = user("hi");
    assert!(
        ids(&contents).is_empty(),
        "a new message: nothing to pick up"
    );
    contents.push(model_calls(&[("c1", "lookup"), ("c2", "scalar")]));
    assert_eq!(ids(&contents), ["c1", "c2"]);
    contents.push(answered("c2", "scalar"));
    assert_eq!(ids(&contents), ["c1"]);
    contents.push(answered("c1", "lookup"));
    assert!(ids(&contents).is_empty(), "every call answered");
    // A call left unanswered by a run that failed, then a new message: nothing.
    let mut later = user("hi");
    later.push(model_calls(&[("c3", "lookup")]));
    later.extend(user("something else"));
    assert!(ids(&later).is_empty());
}

#[tokio::test]
async fn a_run_picks_up_the_calls_a_stored_response_left_unanswered() {
    // The conversation as a restart left it: the model's response with two calls is
    // stored, one of them answered. The run makes the other call, then asks the model.
    let s = setup(vec![answer(vec![text("Both done.")])], &[], 4);
    let mut contents = user("look both up");
    contents.push(model_calls(&[("c1", "lookup"), ("c2", "scalar")]));
    contents.push(answered("c1", "lookup"));
    let mut recorder = Recorder::default();
    s.runner
        .run(&mut contents, "", &mut recorder)
        .await
        .unwrap();
    let calls: Vec<String> = s
        .tools
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|(name, _)| name.clone())
        .collect();
    assert_eq!(calls, ["scalar"], "only the unanswered call is made");
    assert_eq!(
        responses(&recorder),
        vec![json!({"result": 42}).as_object().unwrap().clone()]
    );
    // The model's one request pairs every call with its answer.
    let requests = s.provider.requests();
    assert_eq!(requests.len(), 1);
    let answered: Vec<_> = requests[0]
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id.clone())
        .collect();
    assert_eq!(answered, ["c1", "c2"]);
    assert_eq!(contents.len(), 5, "user, calls, two answers, the text");
}

/// A remote agent behind `ask_billing`: answers in order, and the arguments it was
/// asked with.
#[derive(Default)]
struct Remote {
    answers: Mutex<Vec<Result<Value, String>>>,
    asked: Mutex<Vec<Map<String, Value>>>,
}

#[async_trait]
impl ToolInvoker for Remote {
    async fn invoke(&self, call: &FunctionCall) -> Result<Value, String> {
        assert_eq!(call.name, "ask_billing");
        self.asked.lock().unwrap().push(call.args.clone());
        self.answers.lock().unwrap().remove(0)
    }
}

impl Remote {
    fn asked(&self) -> Vec<Map<String, Value>> {
        self.asked.lock().unwrap().clone()
    }
}

/// A root with the remote agent `billing` as its sub-agent; the model's `scripts`, the
/// remote's `answers`.
fn with_remote(
    scripts: Vec<Result<Vec<ProviderEvent>, ProviderError>>,
    answers: Vec<Result<Value, String>>,
) -> (Arc<ScriptedProvider>, Arc<Remote>, Runner) {
    let provider = Arc::new(ScriptedProvider::new("p", "m", scripts));
    let adapter = ModelAdapter::new(provider.clone());
    let mut settings = settings(&[]);
    settings.sub_agents = vec![SubAgentSettings::remote("billing", "billing")];
    let tree = AgentTree::build(
        &settings,
        &|name| (name == "p").then(|| adapter.clone()),
        &[spec("lookup"), spec("ask_billing")],
    )
    .unwrap();
    let remote = Arc::new(Remote {
        answers: Mutex::new(answers),
        ..Remote::default()
    });
    let runner = Runner::new(
        Arc::new(tree),
        remote.clone(),
        RunSettings {
            max_turns: 4,
            tool_timeout: Duration::from_millis(200),
            max_output_tokens: 0,
            stream: true,
        },
    );
    (provider, remote, runner)
}

fn to_billing() -> Result<Vec<ProviderEvent>, ProviderError> {
    answer(vec![call(
        0,
        "t1",
        TRANSFER_TO_AGENT,
        r#"{"agent_name":"billing"}"#,
    )])
}

fn active_agent(event: &Event) -> Option<&str> {
    event
        .actions
        .state_delta
        .get(ACTIVE_AGENT_KEY)
        .and_then(Value::as_str)
}

#[tokio::test]
async fn a_transfer_to_a_remote_agent_asks_it_and_its_answer_ends_the_run() {
    let (provider, remote, runner) = with_remote(
        vec![to_billing()],
        vec![Ok(json!({"state": "completed", "text": "Paid.",
            "artifacts": [{"text": "receipt 7"}], "taskId": "r1", "contextId": "rc"}))],
    );
    // The root's model is told of it, with its default description.
    let tree = runner.tree();
    let billing = tree.node(tree.find("billing").unwrap());
    assert_eq!(billing.description, "The remote A2A agent billing.");
    assert_eq!(billing.remote.as_deref(), Some("ask_billing"));
    let mut recorder = Recorder::default();
    let mut contents = user("my invoice");
    runner.run(&mut contents, "", &mut recorder).await.unwrap();
    assert_eq!(
        provider.requests().len(),
        1,
        "only the root's model is asked"
    );
    assert_eq!(remote.asked(), [json_map(json!({"text": "my invoice"}))]);
    let complete = recorder.complete();
    // Transfer call and answer, then the remote's call (recorded before it is made) and
    // answer, then its answer as the turn's, handing the conversation back.
    assert_eq!(complete.len(), 5, "{complete:?}");
    assert_eq!(complete[2].author, "billing");
    assert_eq!(
        complete[2].function_calls().next().unwrap().name,
        "ask_billing"
    );
    let last = complete[4];
    assert!(last.turn_complete);
    assert_eq!(last.text(), "Paid.\nreceipt 7");
    assert_eq!(active_agent(last), Some("root"));
    assert_eq!(collect_text(&recorder.events), "Paid.\nreceipt 7");
}

#[tokio::test]
async fn a_remote_agent_that_asks_keeps_the_conversation_until_it_answered() {
    let (provider, remote, runner) = with_remote(
        vec![to_billing()],
        vec![
            Ok(json!({"state": "input-required", "text": "Which invoice?",
                "taskId": "r1", "contextId": "rc"})),
            Ok(
                json!({"state": "completed", "text": "Refunded.", "taskId": "r1", "contextId": "rc"}),
            ),
            Ok(
                json!({"state": "completed", "text": "You're welcome.", "taskId": "r2", "contextId": "rc"}),
            ),
        ],
    );
    let mut recorder = Recorder::default();
    let mut contents = user("my invoice");
    runner.run(&mut contents, "", &mut recorder).await.unwrap();
    let last = *recorder.complete().last().unwrap();
    assert_eq!(last.text(), "Which invoice?");
    assert_eq!(
        active_agent(last),
        None,
        "the conversation stays with billing"
    );

    // The reply continues the remote's task; no model is asked.
    let runner = runner.starting_with(Some("billing"));
    contents.extend(user("number 7"));
    let mut recorder = Recorder::default();
    runner.run(&mut contents, "", &mut recorder).await.unwrap();
    let last = *recorder.complete().last().unwrap();
    assert_eq!(last.text(), "Refunded.");
    assert_eq!(active_agent(last), Some("root"));
    // A later message goes on in the remote's conversation, in a new task.
    contents.extend(user("thanks"));
    runner
        .run(&mut contents, "", &mut Recorder::default())
        .await
        .unwrap();
    assert_eq!(provider.requests().len(), 1);
    assert_eq!(
        remote.asked()[1..],
        [
            json_map(json!({"text": "number 7", "taskId": "r1", "contextId": "rc"})),
            json_map(json!({"text": "thanks", "contextId": "rc"})),
        ]
    );
}

#[tokio::test]
async fn a_remote_agent_that_fails_fails_the_run_with_its_reason() {
    let (_, _, runner) = with_remote(
        vec![to_billing()],
        vec![Err("remote agent billing: unreachable".into())],
    );
    let mut recorder = Recorder::default();
    let e = runner
        .run(&mut user("my invoice"), "", &mut recorder)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "remote agent billing: unreachable");
    let last = *recorder.complete().last().unwrap();
    // The call is answered with the error (the history stays paired), the conversation
    // goes back to the root, and the failure is not an answer.
    assert!(!last.turn_complete);
    assert_eq!(active_agent(last), Some("root"));
    assert_eq!(
        responses(&recorder).last().unwrap()["error"],
        "remote agent billing: unreachable"
    );
}

#[tokio::test]
async fn a_stored_call_of_a_remote_agent_is_picked_up_and_not_made_twice() {
    let (provider, remote, runner) = with_remote(
        vec![],
        vec![Ok(
            json!({"state": "completed", "text": "Paid.", "taskId": "r1", "contextId": "rc"}),
        )],
    );
    let mut contents = user("my invoice");
    contents.push(Content {
        role: "model".into(),
        parts: vec![Part::FunctionCall(FunctionCall {
            id: "ask_billing-1".into(),
            name: "ask_billing".into(),
            args: json_map(json!({"text": "my invoice"})),
        })],
    });
    let mut recorder = Recorder::default();
    runner
        .starting_with(Some("billing"))
        .run(&mut contents, "", &mut recorder)
        .await
        .unwrap();
    assert_eq!(remote.asked().len(), 1);
    assert!(provider.requests().is_empty());
    assert_eq!(recorder.complete().last().unwrap().text(), "Paid.");
}

fn json_map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}
