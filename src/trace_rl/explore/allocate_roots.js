/*
 * JavaScript port of trace_rl.allocation.allocate_roots (src/trace_rl/allocation/roots.py), the exact TRACE
 * root allocation, plus the objective and the uniform baseline, for the `trace-rl explore` page.
 *
 *   max_m sum_i P_mix(v_i, m_i),  P_mix(v, m) = 1 - v^m - (1-v)^m
 *   s.t.  sum_i m_i == budget,  m_i == 0 or min_rollouts <= m_i <= max_rollouts,  #{i: m_i > 0} <= max_active
 *
 * Line for line the same algorithm and the same floating-point operations as the Python solver (powers by
 * binary exponentiation, sums left to right, the same tie rules), so the result is equal, not just equally
 * good: tests/integration/test_explore.py checks it against the Python solver on random instances
 * (in node), and tests/browser/ in Chromium. Keep the two in step when either changes.
 *
 * Loaded as a CommonJS module (node) or as a plain script (browser: window.TraceAllocation).
 */
(function (root) {
  "use strict";

  function fail(message) {
    var err = new Error(message);
    err.name = "ValueError";
    throw err;
  }

  function asProbabilityVector(v, name) {
    if (!Array.isArray(v)) fail(name + " must be a 1-D array of probabilities");
    var out = new Array(v.length);
    for (var i = 0; i < v.length; i++) {
      var x = v[i];
      if (typeof x !== "number") fail(name + " must be real numbers in [0, 1]; got " + JSON.stringify(x));
      if (Number.isNaN(x)) fail(name + " contains NaN; every " + name + " must be a probability in [0, 1]");
      if (x < 0 || x > 1) fail(name + " must lie in [0, 1]; got " + x);
      out[i] = x;
    }
    return out;
  }

  function asInt(x, name, minimum) {
    if (minimum === undefined) minimum = 0;
    if (typeof x !== "number" || Number.isNaN(x)) fail(name + " must be an integer; got " + x);
    if (!Number.isFinite(x) || Math.floor(x) !== x) fail(name + " must be a whole number; got " + x);
    if (x < minimum) fail(name + " must be at least " + minimum + "; got " + x);
    return x;
  }

  /* x**e for a whole e >= 0, as roots._int_power: binary exponentiation, multiplications only. */
  function intPower(x, e) {
    var out = 1.0;
    var base = x;
    while (e > 0) {
      if (e % 2 === 1) out = out * base;
      e = Math.floor(e / 2);
      if (e > 0) base = base * base;
    }
    return out;
  }

  /* Row i: D(v_i, m) for m = start .. start + width - 1, made non-increasing (roots._mixed_increments). */
  function mixedIncrements(v, start, width) {
    var rows = [];
    for (var i = 0; i < v.length; i++) {
      var p = v[i];
      var q = 1.0 - p;
      var pp = intPower(p, start);
      var qq = intPower(q, start);
      var row = new Array(width);
      for (var j = 0; j < width; j++) {
        if (j > 0) {
          pp = pp * p;
          qq = qq * q;
        }
        var inc = pp * q + qq * p;
        row[j] = j > 0 && row[j - 1] < inc ? row[j - 1] : inc;
      }
      rows.push(row);
    }
    return rows;
  }

  function bisectLeft(sorted, x) {
    var lo = 0;
    var hi = sorted.length;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (sorted[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  function allocateRoots(v, budget, options) {
    var opts = options || {};
    var minRollouts = opts.minRollouts === undefined ? 2 : opts.minRollouts;
    var maxRollouts = opts.maxRollouts === undefined ? null : opts.maxRollouts;
    var maxActive = opts.maxActive === undefined ? null : opts.maxActive;
    var probs = asProbabilityVector(v, "v");
    var total = asInt(budget, "budget");
    var low = asInt(minRollouts, "min_rollouts", 1);
    var n = probs.length;
    var cap = maxRollouts === null ? total : asInt(maxRollouts, "max_rollouts", 1);
    if (maxRollouts !== null && cap < low) {
      fail("max_rollouts (" + cap + ") must be at least min_rollouts (" + low + ")");
    }
    var limit = maxActive === null ? n : Math.min(n, asInt(maxActive, "max_active"));

    var m = new Array(n).fill(0);
    if (total === 0) return m;
    var sLo = cap >= low ? Math.ceil(total / Math.max(cap, 1)) : limit + 1;
    var sHi = Math.min(limit, Math.floor(total / low));
    if (sLo > sHi) {
      var why;
      if (total < low) why = "an active prompt needs at least min_rollouts=" + low + " rollouts";
      else if (limit === 0) why = "no prompt may be active (empty pool or max_active=0)";
      else {
        why =
          limit + " active prompts (pool size " + n + ", max_active " + (maxActive === null ? "None" : maxActive) +
          ") with at most max_rollouts=" + cap + " each can spend at most " + limit * cap;
      }
      fail("cannot spend a root budget of " + total + ": " + why);
    }

    // Prompts ranked by balance |v - 1/2| (ties: lower index first). The optimal active set is a prefix.
    var order = [];
    var balance = new Array(n);
    for (var i = 0; i < n; i++) {
      order.push(i);
      balance[i] = Math.min(probs[i], 1.0 - probs[i]);
    }
    order.sort(function (a, b) {
      if (balance[a] !== balance[b]) return balance[a] > balance[b] ? -1 : 1;
      return a - b;
    });
    var vSorted = order.map(function (idx) { return probs[idx]; });
    var setup = [0.0];
    for (i = 0; i < n; i++) {
      var x = vSorted[i];
      var b0 = 1.0 - intPower(x, low) - intPower(1.0 - x, low);
      b0 = low >= 2 ? Math.max(b0, 0.0) : 0.0;
      setup.push(setup[i] + b0);
    }

    var width = Math.min(cap - low, total - low * sLo); // no prompt ever takes more than `width` increments
    var ranks = [];
    var vals = [];
    var rowPos = [];
    var rowCum = [];
    if (width > 0) {
      var inc = mixedIncrements(vSorted.slice(0, sHi), low, width);
      var flat = [];
      for (var r = 0; r < sHi; r++) for (var c = 0; c < width; c++) flat.push(inc[r][c]);
      var glob = flat.map(function (_, t) { return t; });
      glob.sort(function (a, b) { // argsort(-flat, stable): larger first, ties by flat index
        if (flat[a] !== flat[b]) return flat[a] > flat[b] ? -1 : 1;
        return a - b;
      });
      var position = new Array(flat.length);
      for (var t = 0; t < glob.length; t++) {
        position[glob[t]] = t;
        ranks.push(Math.floor(glob[t] / width));
        vals.push(flat[glob[t]]);
      }
      for (r = 0; r < sHi; r++) {
        rowPos.push(position.slice(r * width, (r + 1) * width));
        var cum = [0.0];
        for (c = 0; c < width; c++) cum.push(cum[c] + inc[r][c]);
        rowCum.push(cum);
      }
    }

    // Selection for s active prompts = the first k_s = B - L*s elements (global order) among rows < s.
    var k = total - low * sLo;
    var boundary = 0;
    var chosen = 0.0;
    if (k > 0) {
      var seen = 0;
      while (seen < k) { // one past the k-th element among rows < sLo
        if (ranks[boundary] < sLo) {
          seen += 1;
          chosen += vals[boundary];
        }
        boundary += 1;
      }
    }
    var count = k;
    var bestS = sLo;
    var bestBoundary = boundary;
    var bestValue = setup[sLo] + chosen;
    for (var s = sLo; s < sHi; s++) { // from s to s + 1 active prompts: row s joins, L units leave the pool
      if (width > 0) {
        var a = boundary ? bisectLeft(rowPos[s], boundary) : 0;
        chosen += rowCum[s][a];
        count += a;
      }
      var target = k - low * (s + 1 - sLo);
      while (count > target) {
        boundary -= 1;
        if (ranks[boundary] <= s) {
          count -= 1;
          chosen -= vals[boundary];
        }
      }
      var value = setup[s + 1] + chosen;
      if (value > bestValue + 1e-12 * Math.max(1.0, Math.abs(bestValue))) {
        bestS = s + 1;
        bestBoundary = boundary;
        bestValue = value;
      }
    }

    var countsSorted = new Array(n).fill(0);
    for (i = 0; i < bestS; i++) countsSorted[i] = low;
    if (width > 0) {
      for (t = 0; t < bestBoundary; t++) if (ranks[t] < bestS) countsSorted[ranks[t]] += 1;
    }
    for (i = 0; i < n; i++) m[order[i]] = countsSorted[i];
    return m;
  }

  /* P_mix(v, m) = 1 - v^m - (1-v)^m for m >= 2, else 0 (trace_rl.allocation.mixed_probability). */
  function mixedProbability(v, m) {
    if (m < 2) return 0.0;
    return Math.max(1.0 - Math.pow(v, m) - Math.pow(1.0 - v, m), 0.0);
  }

  /* The budget spread as evenly as possible, lower indices first (trace_rl.cli.allocate.uniform_allocation). */
  function uniformAllocation(n, budget) {
    var out = new Array(n).fill(0);
    if (n === 0) return out;
    for (var i = 0; i < n; i++) out[i] = Math.floor(budget / n) + (i < budget % n ? 1 : 0);
    return out;
  }

  var api = {
    allocateRoots: allocateRoots,
    mixedProbability: mixedProbability,
    uniformAllocation: uniformAllocation,
  };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  else root.TraceAllocation = api;
})(this);
