// What every test of Events needs around it: no unhandled failure in a
// Deferred, no transport remembered as unusable from an earlier test, and
// the Events a test started stopped after it.
import { beforeEach, afterEach } from "node:test";
import assert from "node:assert/strict";

import { Deferred } from "../../static/js/deferred.js";
import { forgetUnusableTransports } from "../../static/js/events.js";

/** Install the hooks; push each Events a test starts onto the returned list. */
export function eventsHooks() {
  const running = [];
  let savedHook;
  let unhandled;
  beforeEach(() => {
    unhandled = [];
    savedHook = Deferred.onUnhandledError;
    Deferred.onUnhandledError = (f) => unhandled.push(f);
    forgetUnusableTransports();
  });
  afterEach(() => {
    for (const e of running.splice(0)) e.stop();
    Deferred.onUnhandledError = savedHook;
    assert.deepEqual(unhandled, [], "no unhandled errors");
  });
  return running;
}
