// A point of a map edge where a real click selects that edge: [x, y] in page pixels, or null.
// The map picks the edge nearest to a click (within 6 px), and edges cross, so the point
// is one on the edge with no other edge within 2 px and no switch or group box drawn there.
// `key` is an edge's data-edge, or a link name (data-link).
(key) => {
  const target = document.querySelector(`svg.map line.edge[data-edge="${key}"]`) ||
    document.querySelector(`svg.map line.edge[data-link="${key}"]`);
  if (!target) return null;
  const svg = target.ownerSVGElement;
  const m = svg.getScreenCTM();
  const tol = 2 / m.a;
  const seg = (el) => ["x1", "y1", "x2", "y2"].map((a) => +el.getAttribute(a));
  const near = (s, x, y) => {
    const [x1, y1, x2, y2] = s;
    const dx = x2 - x1, dy = y2 - y1, len = dx * dx + dy * dy;
    const t = len ? Math.max(0, Math.min(1, ((x - x1) * dx + (y - y1) * dy) / len)) : 0;
    return Math.hypot(x1 + t * dx - x, y1 + t * dy - y);
  };
  const others = [...svg.querySelectorAll("line.edge")].filter((el) => el !== target).map(seg);
  const [x1, y1, x2, y2] = seg(target);
  for (let k = 1; k < 96; k++) {
    const t = 0.5 + (k % 2 ? 1 : -1) * Math.floor(k / 2) / 100; // from the middle outwards
    const x = x1 + (x2 - x1) * t, y = y1 + (y2 - y1) * t;
    if (others.some((s) => near(s, x, y) < tol)) continue;
    const p = svg.createSVGPoint();
    p.x = x; p.y = y;
    const s = p.matrixTransform(m);
    const el = document.elementFromPoint(s.x, s.y);
    if (el && !el.closest("[data-node]")) return [s.x, s.y];
  }
  return null;
}
