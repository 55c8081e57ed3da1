"""Charts drawn on the server as inline SVG: no JavaScript, no front-end build."""

from __future__ import annotations

from html import escape

WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 28, 36
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def line_chart(title: str, labels: list[str], series: dict[str, list[float | None]], unit: str = "") -> str:
    """A line chart of one or more series over `labels` (None: no point), with axes, ticks and a legend."""
    values = [v for points in series.values() for v in points if v is not None]
    top = max(values) if values else 1.0
    bottom = min(0.0, min(values)) if values else 0.0
    if top <= bottom:
        top = bottom + 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(i: int) -> float:
        return LEFT + (plot_w * i / (len(labels) - 1) if len(labels) > 1 else plot_w / 2)

    def y(v: float) -> float:
        return TOP + plot_h * (1 - (v - bottom) / (top - bottom))

    legend_rows = (len(series) + 1) // 2
    height = HEIGHT + 14 * (legend_rows - 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
        f'role="img" aria-label="{escape(title)}" class="chart">',
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="#888"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#888"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        value = bottom + (top - bottom) * fraction
        parts.append(
            f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" font-size="10" text-anchor="end">{value:.3g}{unit}</text>'
        )
    for i, label in enumerate(labels):
        parts.append(
            f'<text x="{x(i):.1f}" y="{TOP + plot_h + 16}" font-size="10" text-anchor="middle">{escape(label)}</text>'
        )
    for n, (name, points) in enumerate(series.items()):
        colour = COLOURS[n % len(COLOURS)]
        coords = [(x(i), y(v)) for i, v in enumerate(points) if v is not None]
        if len(coords) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in coords)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        for px, py in coords:
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>')
        legend_x, legend_y = LEFT + 8 + 240 * (n % 2), HEIGHT - 8 + 14 * (n // 2)
        parts.append(f'<rect x="{legend_x}" y="{legend_y - 4}" width="10" height="3" fill="{colour}"/>')
        parts.append(f'<text x="{legend_x + 14}" y="{legend_y}" font-size="10">{escape(name)}</text>')
    if not values:
        parts.append(f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle">no data yet</text>')
    parts.append("</svg>")
    return "".join(parts)
