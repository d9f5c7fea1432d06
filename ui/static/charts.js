// Draw every chart of the page with uPlot (vendored beside this file). Each <figure class="chart"> holds its
// spec as JSON (ui/charts.py): {title, kind: "lines" | "bars", y: "fraction" | "count" | "value",
// x: [rounds], series: [{label, values, colour}], references: [{label, value, series}]}; a value may be null.
// A reference is drawn in its series' colour; its label is the figure's legend, not text on the plot.
//
// The round axis spans the rounds of the data, half a round either side (one round included), and is
// labelled at whole rounds only. Counts are grouped bars from zero; a reference is a dashed horizontal line.
// After drawing, the figure records what it drew (data-x-ticks, data-bars, data-references) for the tests.
(function () {
  const palette = ["#2277cc", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285", "#c2255c", "#5f3dc4"];
  const STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 1000000];
  const TICK_ROOM_PX = 48;
  const BAR_MAX_PX = 40;

  function colour(i, spec) {
    const given = spec && spec.series[i] && spec.series[i].colour;
    return given || palette[i % palette.length];
  }

  // Whole numbers from ceil(min) to floor(max), every `step` (the smallest of STEPS that leaves room).
  function wholeTicks(min, max, widthPx) {
    const first = Math.ceil(min), last = Math.floor(max);
    const room = Math.max(1, Math.floor(widthPx / TICK_ROOM_PX));
    const step = STEPS.find((s) => (last - first) / s + 1 <= room) || STEPS[STEPS.length - 1];
    const ticks = [];
    for (let t = Math.ceil(first / step) * step; t <= last; t += step) ticks.push(t);
    return ticks;
  }

  // The rounds of the data and half a round either side: fixed, since uPlot widens a one-point scale to 0-100.
  function roundRange(rounds) {
    return [Math.min(...rounds) - 0.5, Math.max(...rounds) + 0.5];
  }

  // One bar per series at each round, side by side within 80% of a round's width (bars at most 40px wide).
  function groupedBars(index, count, counter) {
    return (u, seriesIdx, idx0, idx1) => {
      const path = new Path2D();
      const xs = u.data[0], ys = u.data[seriesIdx];
      const round = Math.abs(u.valToPos(1, "x", true) - u.valToPos(0, "x", true));
      const slot = Math.min(round * 0.8, count * BAR_MAX_PX * devicePixelRatio);
      const width = slot / count, base = u.valToPos(0, "y", true);
      for (let i = idx0; i <= idx1; i++) {
        if (ys[i] == null || ys[i] === 0) continue;
        const left = u.valToPos(xs[i], "x", true) - slot / 2 + index * width;
        const top = u.valToPos(ys[i], "y", true);
        path.rect(left, top, width - 1, base - top);
        counter.bars += 1;
      }
      return { stroke: path, fill: path, clip: null, band: null, gaps: null, flags: 0 };
    };
  }

  function seriesOf(spec, counter) {
    const bars = spec.kind === "bars";
    return spec.series.map((s, i) => (bars
      ? { label: s.label, stroke: colour(i, spec), fill: colour(i, spec) + "cc", width: 1, points: { show: false },
          paths: groupedBars(i, spec.series.length, counter) }
      : { label: s.label, stroke: colour(i, spec), width: 2, spanGaps: true, points: { show: true, size: 6 } }));
  }

  function yScale(spec) {
    if (spec.y === "fraction") return { range: [0, 1] };
    if (spec.y === "count") return { range: (u, min, max) => [0, Math.max(1, Math.ceil((max || 0) * 1.1))] };
    return {};
  }

  function yAxis(spec) {
    if (spec.y === "fraction") return { values: (u, ticks) => ticks.map((t) => Math.round(t * 100) + "%") };
    if (spec.y === "count") return { incrs: STEPS, values: (u, ticks) => ticks.map((t) => String(t)) };
    return {};
  }

  function drawReferences(spec, figure) {
    return (u) => {
      const ctx = u.ctx, left = u.bbox.left, right = u.bbox.left + u.bbox.width;
      ctx.save();
      (spec.references || []).forEach((r) => {
        const y = u.valToPos(r.value, "y", true);
        ctx.strokeStyle = colour(r.series, spec);
        ctx.lineWidth = 1.5 * devicePixelRatio;
        ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
        ctx.beginPath();
        ctx.moveTo(left, y);
        ctx.lineTo(right, y);
        ctx.stroke();
      });
      ctx.restore();
      figure.dataset.references = String((spec.references || []).length);
    };
  }

  function draw(figure) {
    const spec = JSON.parse(figure.querySelector("script.chart-data").textContent);
    if (!spec.x.length) {
      const empty = document.createElement("div");
      empty.className = "empty";
      empty.textContent = spec.title + ": no data yet";
      figure.appendChild(empty);
      return;
    }
    const counter = { bars: 0 };
    const xTicks = (u, axis, min, max) => {
      const ticks = wholeTicks(min, max, u.bbox.width / devicePixelRatio);
      figure.dataset.xTicks = ticks.join(",");
      return ticks;
    };
    const options = {
      title: spec.title, width: Math.max(300, figure.clientWidth - 12), height: 220,
      series: [{ label: "round" }].concat(seriesOf(spec, counter)),
      scales: { x: { time: false, auto: false, range: roundRange(spec.x) }, y: yScale(spec) },
      axes: [{ label: "round", splits: xTicks, values: (u, ticks) => ticks.map(String) }, yAxis(spec)],
      hooks: {
        drawSeries: [() => { figure.dataset.bars = String(counter.bars); }],
        draw: [drawReferences(spec, figure)],
        drawClear: [() => { counter.bars = 0; }],
      },
    };
    new uPlot(options, [spec.x].concat(spec.series.map((s) => s.values)), figure);
    figure.dataset.kind = spec.kind;
    figure.dataset.drawn = "true";
  }
  document.querySelectorAll("figure.chart").forEach(draw);
})();
