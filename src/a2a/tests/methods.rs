//! The method names of every version, and names that are not methods.

use super::super::*;

#[test]
fn method_names_of_every_version() {
    let table = [
        ("SendMessage", Operation::SendMessage, Dialect::V1),
        (
            "SendStreamingMessage",
            Operation::SendStreamingMessage,
            Dialect::V1,
        ),
        ("GetTask", Operation::GetTask, Dialect::V1),
        ("ListTasks", Operation::ListTasks, Dialect::V1),
        ("CancelTask", Operation::CancelTask, Dialect::V1),
        ("SubscribeToTask", Operation::SubscribeToTask, Dialect::V1),
        (
            "CreateTaskPushNotificationConfig",
            Operation::CreatePushConfig,
            Dialect::V1,
        ),
        (
            "GetTaskPushNotificationConfig",
            Operation::GetPushConfig,
            Dialect::V1,
        ),
        (
            "ListTaskPushNotificationConfigs",
            Operation::ListPushConfigs,
            Dialect::V1,
        ),
        (
            "DeleteTaskPushNotificationConfig",
            Operation::DeletePushConfig,
            Dialect::V1,
        ),
        (
            "GetExtendedAgentCard",
            Operation::GetExtendedAgentCard,
            Dialect::V1,
        ),
        ("message/send", Operation::SendMessage, Dialect::V03Rpc),
        (
            "message/stream",
            Operation::SendStreamingMessage,
            Dialect::V03Rpc,
        ),
        ("tasks/get", Operation::GetTask, Dialect::V03Rpc),
        ("tasks/list", Operation::ListTasks, Dialect::V03Rpc),
        ("tasks/cancel", Operation::CancelTask, Dialect::V03Rpc),
        (
            "tasks/resubscribe",
            Operation::SubscribeToTask,
            Dialect::V03Rpc,
        ),
        (
            "tasks/pushNotificationConfig/set",
            Operation::CreatePushConfig,
            Dialect::V03Rpc,
        ),
        (
            "tasks/pushNotificationConfig/get",
            Operation::GetPushConfig,
            Dialect::V03Rpc,
        ),
        (
            "tasks/pushNotificationConfig/list",
            Operation::ListPushConfigs,
            Dialect::V03Rpc,
        ),
        (
            "tasks/pushNotificationConfig/delete",
            Operation::DeletePushConfig,
            Dialect::V03Rpc,
        ),
        (
            "agent/getAuthenticatedExtendedCard",
            Operation::GetExtendedAgentCard,
            Dialect::V03Rpc,
        ),
        ("tasks/send", Operation::SendMessage, Dialect::V01),
        (
            "tasks/sendSubscribe",
            Operation::SendStreamingMessage,
            Dialect::V01,
        ),
        (
            "tasks/pushNotification/set",
            Operation::CreatePushConfig,
            Dialect::V01,
        ),
        (
            "tasks/pushNotification/get",
            Operation::GetPushConfig,
            Dialect::V01,
        ),
    ];
    for (name, op, dialect) in table {
        assert_eq!(method(name), Some((op, dialect)), "{name}");
    }
}

#[test]
fn unknown_and_miscased_names_are_not_methods() {
    for name in [
        "",
        "sendMessage",
        "SENDMESSAGE",
        "message/Send",
        "tasks/send/",
        "GetTask ",
    ] {
        assert_eq!(method(name), None, "{name:?}");
    }
}
