// api.js: JSON-RPC over fetch, errors as RpcError / NetworkError.
import { test } from "node:test";
import assert from "node:assert/strict";

import { CancelledError } from "../../static/js/deferred.js";
import { Api, RpcError, NetworkError, ErrorCode } from "../../static/js/api.js";

function fakeFetch(answer) {
  const requests = [];
  const fetch = async (url, init) => {
    requests.push({ url, init, body: JSON.parse(init.body) });
    return answer(url, init);
  };
  return { fetch, requests };
}

const json = (status, data) => new Response(JSON.stringify(data), {
  status, headers: { "Content-Type": "application/json" },
});

test("a call posts JSON-RPC 2.0 and fires with the result", async () => {
  const f = fakeFetch((url, init) => json(200, { jsonrpc: "2.0", id: JSON.parse(init.body).id, result: "sid-1" }));
  const api = new Api({ fetch: f.fetch });
  assert.equal(await api.call("session.create"), "sid-1");
  const [req] = f.requests;
  assert.equal(req.url, "/api/jsonrpc");
  assert.equal(req.init.method, "POST");
  assert.equal(req.init.headers["Content-Type"], "application/json");
  assert.deepEqual({ ...req.body, id: 0 }, { jsonrpc: "2.0", id: 0, method: "session.create", params: [] });
});

test("the session id and the api key go into the URL", async () => {
  const f = fakeFetch(() => json(200, { jsonrpc: "2.0", id: 1, result: true }));
  const api = new Api({ fetch: f.fetch, apiKey: "k&y", url: "/api/jsonrpc" });
  await api.call("session.destroy", ["a b"], { session: "a b" });
  assert.equal(f.requests[0].url, "/api/jsonrpc?session=a%20b&apikey=k%26y");
});

test("an error answer fails with RpcError carrying code and message", async () => {
  const f = fakeFetch(() => json(200, { jsonrpc: "2.0", id: 1, error: { code: 1001, message: "unknown session" } }));
  const api = new Api({ fetch: f.fetch });
  await assert.rejects(api.call("session.get_events", ["x", 30]), (e) => {
    assert.ok(e instanceof RpcError);
    assert.equal(e.code, ErrorCode.UNKNOWN_SESSION);
    assert.equal(e.message, "unknown session");
    assert.equal(e.method, "session.get_events");
    return true;
  });
});

test("an error with an HTTP error status is still an RpcError", async () => {
  const f = fakeFetch(() => json(413, { error: { code: -32600, message: "body too large" } }));
  await assert.rejects(new Api({ fetch: f.fetch }).call("x"), (e) => e instanceof RpcError && e.code === -32600);
});

test("HTTP errors without a JSON-RPC body, HTML, and dropped connections are NetworkErrors", async () => {
  const cases = [
    () => new Response("<html>Bad gateway</html>", { status: 502 }),
    () => json(503, { status: "down" }),
    () => json(200, { jsonrpc: "2.0", id: 1 }),
    () => { throw new TypeError("Failed to fetch"); },
  ];
  for (const answer of cases) {
    const api = new Api({ fetch: fakeFetch(answer).fetch });
    await assert.rejects(api.call("m"), (e) => e instanceof NetworkError);
  }
  const api = new Api({ fetch: fakeFetch(() => new Response("nope", { status: 502 })).fetch });
  await assert.rejects(api.call("m"), (e) => e.status === 502);
});

test("a call that takes too long fails with a NetworkError", async () => {
  const fetch = (url, init) => new Promise((resolve, reject) => {
    init.signal.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError")));
  });
  const api = new Api({ fetch, timeout: 10 });
  await assert.rejects(api.call("slow"), (e) => e instanceof NetworkError && /timed out/.test(e.message));
});

test("cancelling a call aborts the request", async () => {
  let aborted = false;
  const fetch = (url, init) => new Promise((resolve, reject) => {
    init.signal.addEventListener("abort", () => { aborted = true; reject(new DOMException("aborted", "AbortError")); });
  });
  const d = new Api({ fetch, timeout: 0 }).call("session.get_events");
  d.cancel();
  assert.ok(aborted);
  await assert.rejects(d, CancelledError);
  await new Promise((r) => setTimeout(r, 5));
});
