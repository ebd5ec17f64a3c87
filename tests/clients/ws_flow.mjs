// The WebSocket flow with the npm package ws against a running engine:
// offer the subprotocol pushengine.jsonrpc (and permessage-deflate), create
// a session, subscribe, publish a change over HTTP, receive it as an event.
//
//   node tests/clients/ws_flow.mjs http://127.0.0.1:PORT STREAM_ID
//
// Checks itself (node:assert); prints one JSON line with what it saw.
import assert from "node:assert/strict";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const WebSocket = require("ws");

const base = process.argv[2];
const id = Number(process.argv[3] ?? 710000);
const ws = new WebSocket(base.replace(/^http/, "ws") + "/api/ws", ["pushengine.jsonrpc"],
                         { perMessageDeflate: true });
let headers = {};
ws.on("upgrade", (res) => { headers = res.headers; });
const answers = new Map();
const events = [];
let wake = () => {};
ws.on("message", (data) => {
  const m = JSON.parse(data.toString());
  if (m.method === "events") events.push(...m.params);
  else answers.set(m.id, m);
  wake();
});
const until = (test) => new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error("timed out")), 10000);
  const check = () => { if (test()) { clearTimeout(timer); resolve(); } };
  wake = check;
  check();
});
let ids = 0;
async function call(method, ...params) {
  const myId = ++ids;
  ws.send(JSON.stringify({ jsonrpc: "2.0", id: myId, method, params }));
  await until(() => answers.has(myId));
  return answers.get(myId);
}
await new Promise((resolve, reject) => { ws.on("open", resolve); ws.on("error", reject); });
assert.equal(ws.protocol, "pushengine.jsonrpc");
const sid = (await call("session.create")).result;
const [key] = (await call("stream.subscribe_public_live", sid, 10)).result;
const r = await fetch(new URL("/api/publish", base), {
  method: "POST", headers: { "Content-Type": "application/json" },
  body: JSON.stringify([{ type: "Stream", action: "upsert", obj: {
    id, title: `ws stream ${id}`, user_id: 1, live: true, public: true,
    created_at: "2030-01-01T00:00:00Z" } }]),
});
assert.equal(r.status, 200);
await until(() => events.some((e) => e.obj?.id === id));
const event = events.find((e) => e.obj?.id === id);
assert.equal(event.key, key);
console.log(JSON.stringify({ protocol: ws.protocol, extensions: headers["sec-websocket-extensions"] ?? null,
                             event }));
ws.close();
