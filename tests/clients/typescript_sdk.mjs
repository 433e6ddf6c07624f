// The official TypeScript SDK's client (@modelcontextprotocol/sdk, pinned in package.json)
// as a driver: reads a plan on stdin, prints one JSON line per step. The plan and the
// outcome shapes are described in driving.py. The stdio command "node" means this Node,
// so the tests can start mcp-remote (a Node program) with the Node that runs this file.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const STEP_WAIT_MS = 30_000; // how long one request may take (the long call takes about 6 s)

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

function emit(line) {
  process.stdout.write(JSON.stringify(line) + '\n');
}

function describe(error) {
  return {
    code: error instanceof McpError ? error.code : null,
    message: String(error?.message ?? error),
    type: error?.constructor?.name ?? typeof error,
    data: error instanceof McpError ? (error.data ?? null) : null,
  };
}

function callOutcome(result) {
  const texts = (result.content ?? []).filter((b) => b.type === 'text').map((b) => b.text);
  return {
    is_error: result.isError === true,
    text: texts.join('\n'),
    structured: result.structuredContent ?? null,
  };
}

function transportFor(plan) {
  if (plan.http) return new StreamableHTTPClientTransport(new URL(plan.http));
  const { command, args, env, cwd } = plan.stdio;
  return new StdioClientTransport({
    command: command === 'node' ? process.execPath : command,
    args,
    env,
    cwd,
    stderr: 'inherit',
  });
}

async function cancelCall(client, step) {
  // Abort once the tool says it runs (its first progress notification): no timing guess.
  const controller = new AbortController();
  try {
    await client.callTool({ name: step.name, arguments: step.arguments }, undefined, {
      signal: controller.signal,
      timeout: STEP_WAIT_MS,
      onprogress: () => controller.abort('cancelled by the test'),
    });
  } catch (error) {
    if (controller.signal.aborted) return { cancelled: true };
    throw error;
  }
  return { cancelled: false };
}

const ops = {
  list_tools: async (client) => ({ names: (await client.listTools()).tools.map((t) => t.name) }),
  list_prompts: async (client) => ({ names: (await client.listPrompts()).prompts.map((p) => p.name) }),
  call_tool: async (client, step) =>
    callOutcome(await client.callTool({ name: step.name, arguments: step.arguments }, undefined, { timeout: STEP_WAIT_MS })),
  long_call: async (client, step) => ({ ...(await ops.call_tool(client, step)), via: 'request' }),
  get_prompt: async (client, step) => ({
    messages: (await client.getPrompt({ name: step.name, arguments: step.arguments })).messages.map((m) => ({
      role: m.role,
      kind: m.content.type,
      text: m.content.type === 'text' ? m.content.text : (m.content.resource?.text ?? null),
    })),
  }),
  read_resource: async (client, step) => ({
    contents: (await client.readResource({ uri: step.uri })).contents.map((c) => ({
      uri: c.uri,
      mime_type: c.mimeType ?? null,
      text: c.text ?? null,
    })),
  }),
  cancel_call: cancelCall,
};

const plan = await readStdin();
const client = new Client({ name: 'mcplite-interop-tests', version: '0.0.0' });
await client.connect(transportFor(plan));
for (const step of plan.steps) {
  try {
    emit({ id: step.id, ok: await ops[step.op](client, step) });
  } catch (error) {
    emit({ id: step.id, error: describe(error) });
  }
}
await client.close();
