// Fake browser streams bound to a FakeEngine (fakeengine.mjs), for testing
// transport-sse.js and transport-ws.js in node: an EventSource, a WebSocket
// and the fetch the SSE transport reads a refusal with. Like the network,
// they act asynchronously. `net` says what lies between page and engine:
//
//   net.ws = "ok" | "refuse" (never opens) | "drop" (opens, then closes before any message)
//   net.sse = "ok" | 502 (a proxy's answer instead of the stream) | "reset" (no answer)
//   engine.down = true: nothing answers (calls, streams, sockets)
import { RpcError } from "../../static/js/api.js";

const later = (fn) => setTimeout(fn, 0);

export function fakeNetwork(engine) {
  const net = { ws: "ok", sse: "ok", sources: [], sockets: [], probes: [] };

  function query(url) {
    return new URL(url, "http://engine.test/").searchParams;
  }

  /** What the engine answers to GET /api/events: {status, body} or null (no answer). */
  function sseAnswer(url, stream) {
    if (engine.down || net.sse === "reset") return null;
    if (typeof net.sse === "number") return { status: net.sse, body: "<h1>Bad gateway</h1>" };
    const q = query(url);
    const last = q.has("last_event_id") ? Number(q.get("last_event_id")) : null;
    try {
      if (stream) engine.attach(q.get("session"), stream, last);
      else if (!engine.sessions.has(q.get("session"))) throw new RpcError(1001, "unknown session");
    } catch (e) {
      const status = e.code === 1001 ? 404 : 400;
      return { status, body: JSON.stringify({ error: { code: e.code, message: e.message } }) };
    }
    return { status: 200, body: null };
  }

  class FakeEventSource {
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      this.closed = false;
      this.onopen = this.onmessage = this.onerror = null;
      net.sources.push(this);
      later(() => this._connect());
    }

    _connect() {
      if (this.closed) return;
      const answer = sseAnswer(this.url, this);
      if (answer === null) {
        this.onerror?.({}); // a network error: the browser would reconnect
        return;
      }
      if (answer.status !== 200) {
        this.readyState = 2; // not a stream: failed for good
        this.onerror?.({});
        return;
      }
      this.readyState = 1;
      this.onopen?.({});
      for (const ev of this._early ?? []) this.write([ev]);
      this._early = null;
    }

    // -- the engine's side ------------------------------------------------
    write(events) {
      if (this.closed) return;
      if (this.readyState !== 1) {
        (this._early ??= []).push(...events); // written with the head
        return;
      }
      for (const ev of events) {
        later(() => { if (!this.closed) this.onmessage?.({ data: JSON.stringify(ev), lastEventId: String(ev.seq) }); });
      }
    }

    cut() {
      if (this.closed) return;
      this.readyState = 0;
      later(() => { if (!this.closed) this.onerror?.({}); });
    }

    replaced() {
      this.cut();
    }

    addEventListener(type, listener) {
      ((this._listeners ??= new Map()).get(type) ?? this._listeners.set(type, []).get(type)).push(listener);
    }

    /** The node shuts down: a last "going-away" message, then the stream ends. */
    goAway() {
      if (this.closed) return;
      later(() => {
        if (this.closed) return;
        const data = JSON.stringify({ code: 1001, reason: "the node is shutting down" });
        for (const listener of this._listeners?.get("going-away") ?? []) listener({ data });
        if (this.closed) return;
        this.readyState = 0; // ended: the browser would reconnect by itself
        this.onerror?.({});
      });
    }

    close() {
      this.closed = true;
      this.readyState = 2;
      for (const s of engine.sessions.values()) if (s.stream === this) s.stream = null;
    }
  }

  async function fetch(url, init = {}) {
    net.probes.push(url);
    await new Promise(later);
    const answer = sseAnswer(url, null);
    if (answer === null) throw new TypeError("Failed to fetch");
    return new Response(answer.body, { status: answer.status });
  }

  class FakeWebSocket {
    constructor(url, protocols = undefined) {
      this.url = url;
      this.protocols = protocols; // what the handshake offers (undefined: nothing)
      this.argumentCount = arguments.length;
      this.readyState = 0;
      this.sent = [];
      this.sid = null;
      this.onopen = this.onmessage = this.onerror = this.onclose = null;
      net.sockets.push(this);
      later(() => this._connect());
    }

    _connect() {
      if (this.readyState !== 0) return;
      if (engine.down || net.ws === "refuse") {
        this._closed(1006);
        return;
      }
      this.readyState = 1;
      this.onopen?.({});
      if (net.ws === "drop") later(() => this._closed(1006));
    }

    _closed(code, reason = "") {
      if (this.readyState === 3) return;
      this.readyState = 3;
      if (this.sid) engine.detach(this.sid, this);
      this.onerror?.({});
      this.onclose?.({ code, reason, wasClean: code === 1000 });
    }

    _frame(value) {
      later(() => { if (this.readyState === 1) this.onmessage?.({ data: JSON.stringify(value) }); });
    }

    send(text) {
      if (this.readyState !== 1) throw new Error("InvalidStateError: not open");
      const call = JSON.parse(text);
      this.sent.push(call);
      if (net.ws === "drop" || this._leaving) return; // (after the close frame: not run)
      const { id, method, params } = call;
      const error = (e) => this._frame({ jsonrpc: "2.0", id, error: { code: e.code ?? -32603, message: e.message } });
      if (method === "session.attach") {
        later(() => {
          if (this.readyState !== 1) return;
          // as the engine does: the answer first, then the replayed events
          this._held = [];
          try {
            engine.attach(params[0], this, params[1]);
          } catch (e) {
            this._held = null;
            error(e);
            return;
          }
          if (this.sid && this.sid !== params[0]) engine.detach(this.sid, this);
          this.sid = params[0];
          const held = this._held;
          this._held = null;
          this._frame({ jsonrpc: "2.0", id, result: true });
          for (const events of held) this.write(events);
        });
        return;
      }
      if (method === "session.get_events") {
        error({ code: -32601, message: "not on a WebSocket" });
        return;
      }
      engine.call(method, params, { session: params[0], via: "ws" }).addCallbacks(
        (result) => { this._frame({ jsonrpc: "2.0", id, result }); },
        (f) => { error(f.value); },
      );
    }

    close(code = 1000, reason = "") {
      if (this.readyState === 3) return;
      this.readyState = 3;
      if (this.sid) engine.detach(this.sid, this);
    }

    // -- the engine's side ------------------------------------------------
    write(events) {
      if (this._held) this._held.push(events);
      else this._frame({ jsonrpc: "2.0", method: "events", params: events });
    }

    cut() {
      later(() => this._closed(1006));
    }

    replaced() {
      later(() => this._closed(1000, "the session is delivered elsewhere now"));
    }

    /** The node shuts down: what was written goes first, then a close frame with 1001. */
    goAway() {
      this._leaving = true;
      later(() => this._closed(1001, "the node is shutting down"));
    }
  }

  net.EventSource = FakeEventSource;
  net.WebSocket = FakeWebSocket;
  net.fetch = fetch;
  return net;
}
