// deferred.js: the Twisted Deferred semantics.
import { test, describe, beforeEach, afterEach } from "node:test";
import assert from "node:assert/strict";

import {
  Deferred, Failure, SharedResult, AlreadyCalledError, CancelledError, TimeoutError, FirstError,
  succeed, fail, fromPromise, maybeDeferred, gatherResults, deferLater,
} from "../../static/js/deferred.js";

const tick = (ms = 5) => new Promise((r) => setTimeout(r, ms));

class MyError extends Error {
  constructor(m) { super(m); this.name = "MyError"; }
}
class OtherError extends Error {
  constructor(m) { super(m); this.name = "OtherError"; }
}

// Collect unhandled-error reports instead of printing them.
let reports;
let savedHook;
beforeEach(() => {
  reports = [];
  savedHook = Deferred.onUnhandledError;
  Deferred.onUnhandledError = (failure, d) => reports.push({ failure, d });
});
afterEach(() => {
  Deferred.onUnhandledError = savedHook;
});

describe("callbacks and chaining", () => {
  test("callbacks run in order, each result feeding the next", () => {
    const d = new Deferred();
    const seen = [];
    d.addCallback((x) => { seen.push(x); return x + 1; })
      .addCallback((x) => { seen.push(x); return x * 10; })
      .addCallback((x) => { seen.push(x); });
    assert.deepEqual(seen, []);
    d.callback(1);
    assert.deepEqual(seen, [1, 2, 20]);
    assert.equal(d.result, undefined);
    assert.equal(d.called, true);
  });

  test("a callback added after firing runs at once with the current result", () => {
    const d = succeed(5);
    let got;
    d.addCallback((x) => { got = x; return x; });
    assert.equal(got, 5);
    d.addCallback((x) => x + 1);
    assert.equal(d.result, 6);
  });

  test("extra arguments are passed after the result", () => {
    const d = new Deferred();
    const calls = [];
    d.addCallback((r, a, b) => { calls.push([r, a, b]); return r; }, "a", "b");
    d.addErrback((f, c) => { calls.push(["eb", c]); }, "c");
    d.addCallbacks((r, x) => { calls.push(["cb", r, x]); throw new MyError("x"); }, null, { callbackArgs: [9] });
    d.addCallbacks(null, (f, y) => { calls.push(["eb2", f.value.message, y]); return "ok"; }, { errbackArgs: [8] });
    d.callback(1);
    assert.deepEqual(calls, [[1, "a", "b"], ["cb", 1, 9], ["eb2", "x", 8]]);
    assert.equal(d.result, "ok");
  });

  test("re-entrant: a callback that adds callbacks to its own Deferred", () => {
    const d = new Deferred();
    const order = [];
    d.addCallback((x) => {
      order.push("first");
      d.addCallback((y) => { order.push(`added ${y}`); return y; });
      return x + 1;
    });
    d.addCallback((x) => { order.push(`second ${x}`); return x; });
    d.callback(1);
    assert.deepEqual(order, ["first", "second 2", "added 2"]);
  });

  test("a long chain does not overflow the stack", () => {
    const d = new Deferred();
    for (let i = 0; i < 20000; i++) d.addCallback((x) => x + 1);
    d.callback(0);
    assert.equal(d.result, 20000);
  });

  test("chainDeferred fires the other Deferred", () => {
    const a = new Deferred();
    const b = new Deferred();
    a.chainDeferred(b);
    let got;
    b.addCallback((x) => { got = x; });
    a.callback(3);
    assert.equal(got, 3);
  });
});

describe("errbacks", () => {
  test("errback runs errbacks and skips callbacks", () => {
    const d = new Deferred();
    const seen = [];
    d.addCallback(() => seen.push("cb"));
    d.addErrback((f) => { seen.push(f.value.message); return f; });
    d.addErrback((f) => { seen.push(f instanceof Failure); });
    d.errback(new MyError("boom"));
    assert.deepEqual(seen, ["boom", true]);
    assert.equal(d.result, undefined);
  });

  test("an errback that returns a value switches back to callbacks", () => {
    const d = fail(new MyError("boom"));
    d.addErrback(() => "recovered");
    let got;
    d.addCallback((x) => { got = x; });
    assert.equal(got, "recovered");
  });

  test("a callback that throws switches to errbacks with a Failure of the error", () => {
    const d = new Deferred();
    const err = new MyError("thrown");
    let failure;
    d.addCallback(() => { throw err; }).addCallback(() => assert.fail("skipped"))
      .addErrback((f) => { failure = f; });
    d.callback(1);
    assert.ok(failure instanceof Failure);
    assert.equal(failure.value, err);
    assert.equal(failure.type, MyError);
    assert.equal(failure.getErrorMessage(), "thrown");
  });

  test("a callback that returns a Failure switches to errbacks", () => {
    const d = succeed(1);
    d.addCallback(() => new Failure(new MyError("returned")));
    let msg;
    d.addErrback((f) => { msg = f.getErrorMessage(); });
    assert.equal(msg, "returned");
  });

  test("addCallbacks: the errback of the same pair does not see its callback's error", () => {
    const d = new Deferred();
    const seen = [];
    d.addCallbacks(() => { throw new MyError("x"); }, () => seen.push("same-level errback"));
    d.addErrback(() => seen.push("next errback"));
    d.callback(1);
    assert.deepEqual(seen, ["next errback"]);
  });

  test("addBoth sees results and failures", () => {
    const seen = [];
    succeed(1).addBoth((r) => seen.push(r));
    fail(new MyError("e")).addBoth((r) => { seen.push(r instanceof Failure); });
    assert.deepEqual(seen, [1, true]);
  });

  test("errback with a non-Error value wraps it", () => {
    const d = fail("just a string");
    let f;
    d.addErrback((x) => { f = x; });
    assert.equal(f.value, "just a string");
    assert.equal(f.getErrorMessage(), "just a string");
  });

  test("new Failure(failure) is the same failure", () => {
    const f = new Failure(new MyError("a"));
    assert.equal(new Failure(f), f);
  });
});

describe("trap and check", () => {
  test("trap returns the matching type", () => {
    const d = fail(new MyError("x"));
    let trapped;
    d.addErrback((f) => { trapped = f.trap(OtherError, MyError); return "handled"; });
    assert.equal(trapped, MyError);
    assert.equal(d.result, "handled");
  });

  test("trap re-raises the same failure when nothing matches", () => {
    const original = new Failure(new MyError("x"));
    const d = fail(original);
    let next;
    d.addErrback((f) => { f.trap(OtherError); return "not reached"; });
    d.addErrback((f) => { next = f; });
    assert.equal(next, original);
  });

  test("trap matches base classes and names", () => {
    const f = new Failure(new MyError("x"));
    assert.equal(f.check(Error), Error);
    assert.equal(f.check("MyError"), "MyError");
    assert.equal(f.check(TypeError), null);
    assert.throws(() => f.trap(TypeError), (e) => e === f);
  });

  test("toString names the error", () => {
    assert.equal(String(new Failure(new MyError("bad"))), "[Failure MyError: bad]");
  });
});

describe("a Deferred returned from a callback", () => {
  test("pauses the chain until it fires and passes its result on", () => {
    const outer = new Deferred();
    const inner = new Deferred();
    const seen = [];
    outer.addCallback((x) => { seen.push(`outer ${x}`); return inner; })
      .addCallback((x) => { seen.push(`after ${x}`); return x; });
    outer.callback(1);
    assert.deepEqual(seen, ["outer 1"]);
    assert.equal(outer.paused, 1);
    let late;
    outer.addCallback((x) => { late = x; return x; }); // added while paused: waits too
    assert.equal(late, undefined);
    inner.callback(2);
    assert.deepEqual(seen, ["outer 1", "after 2"]);
    assert.equal(late, 2);
    assert.equal(outer.paused, 0);
    assert.equal(inner.result, undefined, "the inner Deferred is left holding undefined");
  });

  test("an already fired Deferred continues at once", () => {
    const d = succeed(1).addCallback((x) => succeed(x + 1)).addCallback((x) => x * 2);
    assert.equal(d.result, 4);
  });

  test("a failed inner Deferred goes to the outer errbacks", () => {
    const inner = new Deferred();
    const d = succeed(1).addCallback(() => inner);
    let caught;
    d.addErrback((f) => { caught = f.value; });
    const err = new MyError("inner failed");
    inner.errback(err);
    assert.equal(caught, err);
  });

  test("nested returned Deferreds, many levels", () => {
    let d = succeed(0);
    for (let i = 0; i < 5000; i++) d = d.addCallback((x) => succeed(x + 1));
    assert.equal(d.result, 5000);
  });

  test("a returned Promise pauses the chain too", async () => {
    const d = succeed(1).addCallback((x) => Promise.resolve(x + 41));
    assert.ok(d.paused > 0);
    assert.equal(await d, 42);
  });

  test("a callback returning its own Deferred is an error", () => {
    const d = new Deferred();
    let f;
    d.addCallback(() => d).addErrback((x) => { f = x; });
    d.callback(1);
    assert.ok(f.value instanceof TypeError);
  });
});

describe("firing rules", () => {
  test("a second callback raises AlreadyCalledError", () => {
    const d = succeed(1);
    assert.throws(() => d.callback(2), AlreadyCalledError);
    assert.throws(() => d.errback(new Error("x")), AlreadyCalledError);
  });

  test("callback with a Deferred is refused", () => {
    assert.throws(() => new Deferred().callback(new Deferred()), TypeError);
  });

  test("pause and unpause", () => {
    const d = new Deferred();
    const seen = [];
    d.addCallback((x) => seen.push(x));
    d.pause();
    d.callback(1);
    assert.deepEqual(seen, []);
    d.unpause();
    assert.deepEqual(seen, [1]);
  });
});

describe("cancel", () => {
  test("calls the canceller and fails with CancelledError", () => {
    let cancelled = 0;
    const d = new Deferred(() => { cancelled += 1; });
    let f;
    d.addErrback((x) => { f = x; });
    d.cancel();
    assert.equal(cancelled, 1);
    assert.ok(f.value instanceof CancelledError);
  });

  test("a canceller may fire the Deferred itself", () => {
    const d = new Deferred((self) => self.callback("stopped"));
    d.cancel();
    assert.equal(d.result, "stopped");
  });

  test("without canceller, a later callback from the operation is ignored once", () => {
    const d = new Deferred();
    d.addErrback((f) => { f.trap(CancelledError); });
    d.cancel();
    d.callback("late answer"); // no AlreadyCalledError
    assert.throws(() => d.callback("again"), AlreadyCalledError);
  });

  test("cancelling a paused chain cancels the Deferred it waits on", () => {
    let innerCancelled = false;
    const inner = new Deferred(() => { innerCancelled = true; });
    const d = succeed(1).addCallback(() => inner);
    let f;
    d.addErrback((x) => { f = x; });
    d.cancel();
    assert.ok(innerCancelled);
    assert.ok(f.value instanceof CancelledError);
  });

  test("cancel after firing does nothing", () => {
    const d = succeed(1);
    d.cancel();
    assert.equal(d.result, 1);
  });

  test("addTimeout fails with TimeoutError", async () => {
    const d = new Deferred().addTimeout(5);
    await assert.rejects(d, TimeoutError);
  });

  test("addTimeout does nothing when the result comes in time", async () => {
    const d = new Deferred().addTimeout(20);
    d.callback("fast");
    await tick(30);
    assert.equal(d.result, "fast");
  });
});

describe("unhandled errors", () => {
  test("a failure left at the end of a chain is reported after a tick", async () => {
    const d = fail(new MyError("nobody cares"));
    assert.equal(reports.length, 0, "not synchronously");
    await tick();
    assert.equal(reports.length, 1);
    assert.equal(reports[0].d, d);
    assert.equal(reports[0].failure.value.message, "nobody cares");
  });

  test("a failure handled in the same tick is not reported", async () => {
    const d = fail(new MyError("handled later"));
    d.addErrback(() => null);
    await tick();
    assert.equal(reports.length, 0);
  });

  test("a failure passed on into a returned Deferred is reported once, by the outer chain", async () => {
    const inner = fail(new MyError("inner"));
    succeed(1).addCallback(() => inner);
    await tick();
    assert.equal(reports.length, 1);
  });

  test("a failure awaited is not reported by the Deferred", async () => {
    const d = fail(new MyError("awaited"));
    await assert.rejects(d, MyError);
    await tick();
    assert.equal(reports.length, 0);
  });

  test("a failure re-raised by trap and not caught is reported", async () => {
    const d = fail(new MyError("x"));
    d.addErrback((f) => f.trap(OtherError));
    await tick();
    assert.equal(reports.length, 1);
  });

  test("a pending Deferred and a successful one are not reported", async () => {
    new Deferred(); // eslint-disable-line no-new
    succeed(1);
    await tick();
    assert.equal(reports.length, 0);
  });

  test("a broken hook does not break the chain", async () => {
    Deferred.onUnhandledError = () => { throw new Error("hook"); };
    fail(new MyError("x"));
    await tick();
  });
});

describe("await and Promise interop", () => {
  test("await gives the result", async () => {
    const d = new Deferred();
    setTimeout(() => d.callback("later"), 1);
    assert.equal(await d, "later");
  });

  test("await throws the error (not the Failure)", async () => {
    const err = new MyError("nope");
    await assert.rejects(fail(err), (e) => e === err);
  });

  test("then does not change the chain", async () => {
    const d = succeed(1);
    const v = await d.then((x) => x + 100);
    assert.equal(v, 101);
    assert.equal(d.result, 1);
    d.addCallback((x) => x + 1);
    assert.equal(d.result, 2);
  });

  test("catch and finally", async () => {
    let fin = false;
    const v = await fail(new MyError("x")).catch((e) => e.message).finally(() => { fin = true; });
    assert.equal(v, "x");
    assert.ok(fin);
  });

  test("Promise.all accepts Deferreds", async () => {
    assert.deepEqual(await Promise.all([succeed(1), succeed(2)]), [1, 2]);
  });

  test("fromPromise", async () => {
    const d = fromPromise(Promise.resolve(7));
    assert.equal(await d, 7);
    const e = fromPromise(Promise.reject(new MyError("r")));
    let f;
    e.addErrback((x) => { f = x; });
    await tick();
    assert.ok(f.value instanceof MyError);
  });

  test("an async function may return a Deferred", async () => {
    const fn = async () => succeed("from async");
    assert.equal(await fn(), "from async");
  });
});

describe("helpers", () => {
  test("succeed and fail", () => {
    assert.equal(succeed(3).result, 3);
    const f = fail(new MyError("m"));
    assert.ok(f.result instanceof Failure);
    f.addErrback(() => null);
  });

  test("maybeDeferred wraps values, exceptions, Deferreds and Promises", async () => {
    assert.equal(maybeDeferred((a, b) => a + b, 1, 2).result, 3);
    const thrown = maybeDeferred(() => { throw new MyError("t"); });
    assert.ok(thrown.result instanceof Failure);
    thrown.addErrback(() => null);
    const d = new Deferred();
    assert.equal(maybeDeferred(() => d), d);
    assert.equal(await maybeDeferred(() => Promise.resolve(4)), 4);
  });

  test("gatherResults keeps the order", () => {
    const a = new Deferred();
    const b = new Deferred();
    const g = gatherResults([a, b, 3]);
    b.callback("b");
    assert.equal(g.called, false);
    a.callback("a");
    assert.deepEqual(g.result, ["a", "b", 3]);
  });

  test("gatherResults of nothing", () => {
    assert.deepEqual(gatherResults([]).result, []);
  });

  test("gatherResults fails with FirstError on the first failure", async () => {
    const a = new Deferred();
    const b = new Deferred();
    const g = gatherResults([a, b], true);
    let f;
    g.addErrback((x) => { f = x; });
    b.errback(new MyError("b failed"));
    a.errback(new OtherError("a failed later"));
    assert.ok(f.value instanceof FirstError);
    assert.equal(f.value.index, 1);
    assert.ok(f.value.subFailure.value instanceof MyError);
    await tick();
    assert.equal(reports.length, 0, "consumeErrors: the inputs' failures are consumed");
  });

  test("gatherResults without consumeErrors leaves failures in the inputs", async () => {
    const a = fail(new MyError("a"));
    gatherResults([a]).addErrback(() => null);
    await tick();
    assert.equal(reports.length, 1);
    assert.equal(reports[0].d, a);
  });

  test("cancelling gatherResults cancels the inputs", () => {
    let cancelled = 0;
    const a = new Deferred(() => { cancelled += 1; });
    const b = succeed(1);
    const g = gatherResults([a, b], true);
    g.addErrback(() => null);
    g.cancel();
    assert.equal(cancelled, 1);
  });

  test("deferLater fires after the delay and can be cancelled", async () => {
    const d = deferLater(2, (x) => x * 2, 21);
    assert.equal(d.called, false);
    assert.equal(await d, 42);
    let ran = false;
    const c = deferLater(5, () => { ran = true; });
    c.addErrback((f) => { f.trap(CancelledError); });
    c.cancel();
    await tick(15);
    assert.equal(ran, false);
  });

  test("SharedResult gives every waiter its own Deferred", async () => {
    const source = new Deferred();
    const shared = new SharedResult(source);
    const a = shared.wait().addCallback((x) => x + 1);
    const b = shared.wait();
    source.callback(1);
    assert.equal(a.result, 2);
    assert.equal(b.result, 1);
    assert.equal(shared.wait().result, 1);
  });

  test("SharedResult hands a failure to each waiter", async () => {
    const source = new Deferred();
    const shared = new SharedResult(source);
    const a = shared.wait();
    const b = shared.wait();
    source.errback(new MyError("x"));
    await assert.rejects(a, MyError);
    await assert.rejects(b, MyError);
    await tick();
    assert.equal(reports.length, 0);
  });
});
