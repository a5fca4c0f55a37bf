// Echo agent on the official A2A JavaScript SDK (@a2a-js/sdk 1.x, express), for
// benches/compare/run.sh.
//
// Every SendMessage creates a task and completes it at once, with an agent message that
// echoes the user's text in its status. Tasks live in the SDK's in-memory task store.
// JSON-RPC is served at POST / (protocol 1.0), the agent card at
// /.well-known/agent-card.json.
//
//     node echo.mjs --host 127.0.0.1 --port 9102

import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';

import express from 'express';
import { AGENT_CARD_PATH, Role, TaskState } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { UserBuilder, agentCardHandler, jsonRpcHandler } from '@a2a-js/sdk/server/express';

const { values: args } = parseArgs({
  options: {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string', default: '9102' },
  },
});

const card = {
  name: 'echo (@a2a-js/sdk)',
  description: "Echoes the user's text; benchmark fixture.",
  version: '1.0.0',
  supportedInterfaces: [
    {
      url: `http://${args.host}:${args.port}/`,
      protocolBinding: 'JSONRPC',
      protocolVersion: '1.0',
      tenant: '',
    },
  ],
  capabilities: { streaming: true, pushNotifications: false, extensions: [] },
  defaultInputModes: ['text/plain'],
  defaultOutputModes: ['text/plain'],
  skills: [{ id: 'echo', name: 'echo', description: 'echo', tags: ['echo'], examples: [] }],
  securitySchemes: {},
  securityRequirements: [],
  signatures: [],
};

/** Completes every task with the user's text echoed back. */
const echoExecutor = {
  async execute(requestContext, eventBus) {
    const { taskId, contextId, userMessage } = requestContext;
    const text = userMessage.parts
      .filter((part) => part.content?.$case === 'text')
      .map((part) => part.content.value)
      .join('\n');
    eventBus.publish(
      AgentEvent.task(
        requestContext.task ?? {
          id: taskId,
          contextId,
          status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: new Date().toISOString() },
          artifacts: [],
          history: [userMessage],
          metadata: undefined,
        },
      ),
    );
    eventBus.publish(
      AgentEvent.statusUpdate({
        taskId,
        contextId,
        status: {
          state: TaskState.TASK_STATE_COMPLETED,
          message: {
            messageId: randomUUID(),
            contextId,
            taskId,
            role: Role.ROLE_AGENT,
            parts: [{ content: { $case: 'text', value: text } }],
            metadata: undefined,
            extensions: [],
            referenceTaskIds: [],
          },
          timestamp: new Date().toISOString(),
        },
        metadata: undefined,
      }),
    );
    // The request handler settles the bus once execute returns.
  },
  async cancelTask() {
    throw new Error('an echo finishes before it could be canceled');
  },
};

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), echoExecutor);
const app = express();
app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }));
app.use(jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
app.listen(Number(args.port), args.host);
