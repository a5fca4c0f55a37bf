//! Tests of the A2A client across its files: a 0.3 HTTP+JSON answer read through its
//! rewrite into the 0.3 JSON-RPC shape ([`rest03`](super::rest03)) and the 0.3 reader
//! ([`answer`](super::answer)), and a message sent in the 0.3 proto's shape.

use serde_json::json;

use super::answer::{outcome_03, text_03};
use super::endpoint::{Binding, CallError};
use super::{message_of, rest03};

#[test]
fn a_0_3_http_json_answer_reads_as_its_json_rpc_twin() {
    let task = json!({"task": {"id": "t1", "contextId": "c1",
        "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"messageId": "m",
            "role": "ROLE_AGENT", "content": [{"text": "which one?"}]}},
        "artifacts": [{"artifactId": "a", "name": "n", "parts": [
            {"text": "one"}, {"data": {"data": {"n": 1}}}]}]}});
    let read = outcome_03(&rest03::as_rpc(task)).unwrap().unwrap();
    assert_eq!(
        (read.state, read.text.as_str()),
        ("input-required", "which one?")
    );
    assert_eq!(
        read.artifacts,
        vec![json!({"name": "n", "text": "one", "data": [{"n": 1}]})]
    );
    let canceled = json!({"id": "t2", "status": {"state": "TASK_STATE_CANCELLED"}});
    let e = outcome_03(&rest03::as_rpc(canceled)).unwrap_err();
    assert_eq!(e, CallError::Refused("its task t2 canceled".into()));
    // A direct reply, under the proto's field name or its JSON name.
    for key in ["msg", "message"] {
        let reply = json!({key: {"messageId": "m", "role": "ROLE_AGENT",
            "content": [{"text": "hi"}]}});
        assert_eq!(text_03(&rest03::as_rpc(reply)), "hi");
    }
    let sent = message_of(Binding::Rest03, "m", "x", Some(&json!({"k": 1})), None);
    assert_eq!(
        sent,
        json!({"messageId": "m", "role": "ROLE_USER",
            "content": [{"text": "x"}, {"data": {"data": {"k": 1}}}]})
    );
}
