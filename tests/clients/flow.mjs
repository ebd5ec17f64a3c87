// The whole client flow with two JSON-RPC clients from npm, jayson and
// json-rpc-2.0, against a running engine (started with --namespace qik):
// session, subscribe, an event, profiles, errors, the namespaced names, and
// the mixed batch of the JSON-RPC 2.0 specification's section 7.
//
//   node tests/clients/flow.mjs http://127.0.0.1:PORT
//
// Checks itself (node:assert); prints one JSON line with what it saw.
import assert from "node:assert/strict";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const jayson = require("jayson");
const { JSONRPCClient, isJSONRPCResponses, isJSONRPCResponse } = require("json-rpc-2.0");

const base = process.argv[2];
const url = new URL("/api/jsonrpc", base);
let streamId = Number(process.argv[3] ?? 700000);

async function publish(...changes) {
  const r = await fetch(new URL("/api/publish", base), {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(changes),
  });
  assert.equal(r.status, 200, await r.text());
}

function stream(id) {
  return { type: "Stream", action: "upsert", obj: {
    id, title: `npm client stream ${id}`, user_id: 340699, live: true, public: true,
    created_at: new Date(Date.UTC(2030, 0, 1, 0, 0, id % 60)).toISOString().replace(/\.\d+Z$/, "Z"),
  } };
}

// The mixed batch: valid calls, a notification, {"foo": "boo"}, an unknown
// method and a readable id with a wrong version. Each element is answered on
// its own, in the 2.0 form.
const extras = [
  { foo: "boo" },
  { jsonrpc: "1.0", method: "stats.online", id: "v1" },
];

function checkMixedAnswer(answers, ids) {
  assert.ok(Array.isArray(answers), JSON.stringify(answers));
  assert.ok(isJSONRPCResponses(answers), `not all 2.0 responses: ${JSON.stringify(answers)}`);
  const byId = new Map(answers.map((a) => [a.id, a]));
  for (const id of ids.ok) assert.ok("result" in byId.get(id), JSON.stringify(answers));
  assert.equal(byId.get(ids.unknown).error.code, -32601);
  const nulls = answers.filter((a) => a.id === null);
  assert.equal(nulls.length, 1, JSON.stringify(answers));
  assert.equal(nulls[0].error.code, -32600);
  assert.equal(byId.get("v1").error.code, -32600);
  assert.equal(answers.length, ids.ok.length + 3);
}

// -- jayson ---------------------------------------------------------------------------
async function withJayson() {
  const client = jayson.client.http({ hostname: url.hostname, port: Number(url.port), path: url.pathname });
  const call = (method, params) => new Promise((resolve, reject) => {
    client.request(method, params, (err, response) => {
      if (err) reject(err);
      else if (response.error) reject(Object.assign(new Error(response.error.message), { code: response.error.code }));
      else resolve(response.result);
    });
  });
  const seen = {};
  const sid = await call("session.create", []);
  assert.equal(typeof sid, "string");
  const [key, state] = await call("stream.subscribe_public_live", [sid, 5]);
  assert.equal(key, "PublicLiveStreamView(limit=5)");
  assert.ok(Array.isArray(state));
  const id = streamId++;
  await publish(stream(id));
  const events = await call("session.get_events", [sid, 5, 0]);
  assert.ok(events.some((e) => e.action === "insert" && e.obj.id === id), JSON.stringify(events));
  const ack = events[events.length - 1].seq;
  assert.deepEqual(await call("session.get_events", [sid, 0, ack]), []);
  seen.profile = await call("user.public_profile", [340699]);
  assert.deepEqual(await call("user.public_profiles", [[340699, 1]]), [seen.profile, null]);
  assert.equal(await call("qik.user.public_profile", { user_id: 340699 }).then((p) => p.name), seen.profile.name);
  await assert.rejects(call("session.get_events", ["no-such-session", 0]), (e) => e.code === 1001);
  await assert.rejects(call("no.such.method", []), (e) => e.code === -32601);
  await assert.rejects(call("user.public_profile", [true]), (e) => e.code === -32602);
  // the mixed batch: jayson sends raw request objects and splits the answer
  const batch = [
    client.request("stats.online", [], "j1"),
    client.request("qik.stats.online", [], "j2"),
    client.request("session.create", [], null),           // a notification
    client.request("foo.get", { name: "myself" }, "j5"),
    ...extras,
  ];
  const [errors, successes, raw] = await new Promise((resolve, reject) => {
    client.request(batch, (err, errs, oks) => (err ? reject(err) : resolve([errs, oks])));
  }).then(async ([errs, oks]) => [errs, oks, await rawPost(batch)]);
  assert.deepEqual(successes.map((s) => s.id).sort(), ["j1", "j2"]);
  assert.deepEqual(errors.map((e) => [e.id, e.error.code]).sort(),
    [["j5", -32601], ["v1", -32600], [null, -32600]].sort());
  for (const answer of [...errors, ...successes]) {
    assert.ok(jayson.utils.Response.isValidResponse(answer, 2), JSON.stringify(answer));
  }
  checkMixedAnswer(raw, { ok: ["j1", "j2"], unknown: "j5" });
  assert.equal(await call("qik.session.destroy", [sid]), true);
  seen.jayson = "ok";
  return seen;
}

async function rawPost(body) {
  const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  assert.equal(r.status, 200);
  return r.json();
}

// -- json-rpc-2.0 -----------------------------------------------------------------------
async function withJsonRpc2() {
  let lastRaw = null;
  let addExtras = false;
  const client = new JSONRPCClient(async (payload) => {
    const body = addExtras ? [...payload, ...extras] : payload;
    const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    if (r.status === 200) {
      lastRaw = await r.json();
      client.receive(lastRaw);
    } else if (payload.id !== undefined) {
      throw new Error(`HTTP ${r.status}`);
    }
  });
  const sid = await client.request("qik.session.create", []);
  assert.equal(typeof sid, "string");
  const [key] = await client.request("qik.stream.subscribe_public_live", [sid, 3]);
  assert.equal(key, "PublicLiveStreamView(limit=3)");
  const id = streamId++;
  await publish(stream(id));
  const events = await client.request("qik.session.get_events", { sid, timeout: 5, ack: 0 });
  assert.ok(events.some((e) => e.obj && e.obj.id === id), JSON.stringify(events));
  const profiles = await client.request("user.public_profiles", [[1, 340699]]);
  assert.equal(profiles[0], null);
  assert.equal(typeof profiles[1].name, "string");
  await assert.rejects(client.request("session.get_events", ["no-such-session", 0]), (e) => e.code === 1001);
  await assert.rejects(client.request("no.such", []), (e) => e.code === -32601);
  // the mixed batch through the client's own batch call, with the extras added on the wire
  addExtras = true;
  const responses = await client.requestAdvanced([
    { jsonrpc: "2.0", method: "stats.online", params: [], id: 11 },
    { jsonrpc: "2.0", method: "session.create" },
    { jsonrpc: "2.0", method: "stats.online", params: { key: "PublicLiveStreamView(limit=3)" }, id: 12 },
    { jsonrpc: "2.0", method: "foo.get", params: { name: "myself" }, id: 15 },
  ]);
  addExtras = false;
  assert.deepEqual(responses.map((r) => r.id), [11, 12, 15]);
  assert.ok(responses.every(isJSONRPCResponse));
  assert.equal(typeof responses[0].result, "number");
  assert.ok(responses[1].result >= 1, JSON.stringify(responses));
  assert.equal(responses[2].error.code, -32601);
  checkMixedAnswer(lastRaw, { ok: [11, 12], unknown: 15 });
  client.notify("qik.session.destroy", [sid]);
  return { "json-rpc-2.0": "ok" };
}

const seen = { ...(await withJayson()), ...(await withJsonRpc2()) };
console.log(JSON.stringify(seen));
