// `sluice serve` driven by the official MCP TypeScript SDK (@modelcontextprotocol/sdk), as an MCP
// client would. Run by tests/serve.rs with SLUICE_MCP_URL set to a gateway whose tenant's policy
// denies deletes and the tool `sluice.sleep`, and whose approver approves asks. NODE_PATH names
// the folder the SDK was installed into. Prints one line per check; exits 1 on the first failure.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH, "index.js"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const url = new URL(process.env.SLUICE_MCP_URL);
const text = (r) => r.content.map((c) => c.text ?? "").join("");
function check(cond, what) {
  if (!cond) {
    console.error(`FAIL ${what}`);
    process.exit(1);
  }
}

async function session() {
  const client = new Client({ name: "sluice-ts-test", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(url));
  return client;
}

const a = await session();
const tools = Object.fromEntries((await a.listTools()).tools.map((t) => [t.name, t]));
check(tools["sluice.kv.incr"]?.annotations?.destructiveHint === true, "incr is destructive");
check(tools["sluice.kv.get"]?.annotations?.readOnlyHint === true, "get is read-only");
check(!("sluice.sleep" in tools), "a tool its tool rule denies is not listed");
console.log("ok   tools/list through the TypeScript SDK: annotations from effects, denied tools left out");

const sessions = [a, await session(), await session()];
await Promise.all(
  sessions.flatMap((s) =>
    Array.from({ length: 10 }, () =>
      s.callTool({ name: "sluice.kv.incr", arguments: { key: "ts", delay_ms: 3 } }).then((r) =>
        check(!r.isError, `incr: ${text(r)}`)
      )
    )
  )
);
const got = await a.callTool({ name: "sluice.kv.get", arguments: { key: "ts" } });
check(got.structuredContent?.value === 30, `30 increments, got ${JSON.stringify(got.structuredContent)}`);
console.log("ok   30 concurrent increments from 3 sessions: none lost");

const denied = await a.callTool({ name: "sluice.kv.delete", arguments: { key: "ts" } });
check(denied.isError && text(denied).startsWith("denied (no-deletes)"), `denied: ${text(denied)}`);
const bad = await a.callTool({ name: "sluice.kv.get", arguments: { key: 5 } });
check(bad.isError && text(bad).startsWith("invalid-input (/key)"), `invalid: ${text(bad)}`);
let unknown = null;
try {
  await a.callTool({ name: "no.such.tool", arguments: {} });
} catch (e) {
  unknown = e;
}
check(unknown && unknown.code === -32602, `unknown tool: ${unknown}`);
console.log("ok   denial and invalid input are readable results; an unknown tool is -32602");

// Cancel a call that waits behind a conflicting one: it never runs.
const first = a.callTool({ name: "sluice.kv.incr", arguments: { key: "ts-cancel", delay_ms: 400 } });
await new Promise((r) => setTimeout(r, 100));
const abort = new AbortController();
const second = a
  .callTool({ name: "sluice.kv.incr", arguments: { key: "ts-cancel" } }, undefined, { signal: abort.signal })
  .catch(() => null);
await new Promise((r) => setTimeout(r, 100));
abort.abort("the user changed their mind");
await second;
check(!(await first).isError, "the first incr ran");
await new Promise((r) => setTimeout(r, 500));
const after = await a.callTool({ name: "sluice.kv.get", arguments: { key: "ts-cancel" } });
check(after.structuredContent?.value === 1, `the cancelled incr ran: ${JSON.stringify(after.structuredContent)}`);
console.log("ok   a cancelled waiting call never runs");

for (const s of sessions) await s.close();
console.log("4 checks passed");
