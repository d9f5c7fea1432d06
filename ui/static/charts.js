// Draw every chart of the page with uPlot (vendored beside this file). Each <figure class="chart"> holds
// its data as JSON: {title, x: [rounds], series: [{label, values}]}; values may be null (no point).
(function () {
  const palette = ["#2277cc", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285", "#c2255c", "#5f3dc4"];
  function draw(figure) {
    const spec = JSON.parse(figure.querySelector("script.chart-data").textContent);
    if (!spec.x.length) {
      const empty = document.createElement("div");
      empty.className = "empty";
      empty.textContent = spec.title + ": no data yet";
      figure.appendChild(empty);
      return;
    }
    const series = [{ label: "round" }].concat(spec.series.map((s, i) => ({
      label: s.label, stroke: palette[i % palette.length], width: 2, spanGaps: true,
      points: { show: true, size: 6 },
    })));
    const options = {
      title: spec.title, width: Math.max(300, figure.clientWidth - 12), height: 220, series: series,
      scales: { x: { time: false } },
      axes: [{ label: "round", values: (u, ticks) => ticks.map((t) => (Number.isInteger(t) ? t : "")) }, {}],
    };
    new uPlot(options, [spec.x].concat(spec.series.map((s) => s.values)), figure);
    figure.dataset.drawn = "true";
  }
  document.querySelectorAll("figure.chart").forEach(draw);
})();
