"""The liveness picture of a memory report: bytes live on each virtual IPU over the schedule.

One panel per virtual IPU, as PopVision's liveness view: the x axis is the schedule (the
positions of the compiled program's ops, in program order), the y axis the bytes live per
replica: the resident bytes (variables, stashes, constants) as a band at the bottom and the
live activations on top of it, with the activation peak marked and the op there named.
In an SVG, hovering over the peak line lists the tensors live there (`MemoryReport.peak_tensors`).

```python
report = session.memory_report(print_table=False)
report.write_liveness("liveness.svg")    # written directly, no dependency
report.write_liveness("liveness.png")    # with matplotlib (pip install 'xl-popxl[plot]')
```
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xl.runtime.memory import MemoryReport

__all__ = ["liveness_svg", "write_liveness"]

SUFFIXES = (".svg", ".png")
_WIDTH, _PANEL, _LEFT, _RIGHT, _TOP, _BOTTOM = 960, 230, 90, 30, 46, 44
_RESIDENT_COLOR, _ACTIVATION_COLOR, _PEAK_COLOR = "#8fb3d9", "#f0a040", "#c0392b"


def write_liveness(report: MemoryReport, path: str | Path) -> Path:
    """Draw `report`'s liveness into `path` (`.svg`, or `.png` with matplotlib); returns the path."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"liveness picture {str(path)!r}: the file name must end in .svg or .png")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"liveness picture {str(path)!r}: no directory {str(path.parent)!r}")
    if suffix == ".svg":
        path.write_text(liveness_svg(report), encoding="utf-8")
    else:
        _write_png(report, path)
    return path


def _nice_step(span: float, ticks: int = 5) -> float:
    """A round tick spacing (1, 2 or 5 times a power of ten) for about `ticks` ticks."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * power >= raw:
            return m * power
    return 10 * power


def _unit(max_bytes: float) -> tuple[float, str]:
    for scale, name in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
        if max_bytes >= scale:
            return float(scale), name
    return 1.0, "B"


def _series(report: MemoryReport, ipu: int) -> tuple[list[tuple[int, int]], int, int]:
    """The activation steps extended to the end of the schedule, the resident bytes and the
    last position."""
    end = max(report.num_ops, 1)
    steps = report.liveness(ipu)
    return steps, report.resident(ipu), end


def liveness_svg(report: MemoryReport) -> str:
    """The liveness picture as SVG text (see the module docstring)."""
    from xl.runtime.memory import format_bytes

    height = _TOP + _PANEL * len(report.ipus) + 16
    plot_w = _WIDTH - _LEFT - _RIGHT
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{_WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{_LEFT}" y="18" font-size="14" font-weight="bold">Liveness per virtual IPU '
        f"(bytes per replica; {report.replication_factor} replica{'s' if report.replication_factor != 1 else ''})"
        "</text>",
        f'<rect x="{_LEFT}" y="26" width="10" height="10" fill="{_RESIDENT_COLOR}"/>'
        f'<text x="{_LEFT + 14}" y="35">variables, stashes, constants</text>'
        f'<rect x="{_LEFT + 200}" y="26" width="10" height="10" fill="{_ACTIVATION_COLOR}"/>'
        f'<text x="{_LEFT + 214}" y="35">live activations</text>',
    ]
    for k, m in enumerate(report.ipus):
        steps, resident, end = _series(report, m.ipu)
        top = _TOP + k * _PANEL + 18
        plot_h = _PANEL - _BOTTOM - 18
        ymax = max(resident + max(b for _, b in steps), 1)
        scale, unit = _unit(ymax)
        tick = _nice_step(ymax / scale)
        ymax_axis = math.ceil(ymax / scale / tick) * tick * scale

        def x(p: float, end: int = end) -> float:
            return _LEFT + plot_w * p / end

        def y(b: float, top: float = top, plot_h: int = plot_h, ymax_axis: float = ymax_axis) -> float:
            return top + plot_h - plot_h * b / ymax_axis

        title = f"IPU {m.ipu}: {format_bytes(m.total)} resident at the peak"
        if m.peak_position is not None:
            title += (
                f" ({format_bytes(resident)} variables, stashes and constants + "
                f"{format_bytes(m.activations_peak)} activations at op {m.peak_position})"
            )
        parts.append(f'<g id="ipu{m.ipu}">')
        parts.append(f'<text x="{_LEFT}" y="{top - 6:.1f}" font-weight="bold">{escape(title)}</text>')
        # grid and y ticks
        v = 0.0
        while v <= ymax_axis / scale + 1e-9:
            yy = y(v * scale)
            parts.append(f'<line x1="{_LEFT}" y1="{yy:.1f}" x2="{_LEFT + plot_w}" y2="{yy:.1f}" stroke="#e4e4e4"/>')
            parts.append(f'<text x="{_LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end">{v:g} {unit}</text>')
            v += tick
        # resident band, then the activations on top of it (a step outline)
        if resident:
            parts.append(
                f'<rect x="{_LEFT}" y="{y(resident):.1f}" width="{plot_w}" height="{y(0) - y(resident):.1f}" '
                f'fill="{_RESIDENT_COLOR}"/>'
            )
        pts = [f"{x(0):.1f},{y(resident):.1f}"]
        for i, (p, b) in enumerate(steps):
            nxt = steps[i + 1][0] if i + 1 < len(steps) else end
            pts.append(f"{x(p):.1f},{y(resident + b):.1f}")
            pts.append(f"{x(nxt):.1f},{y(resident + b):.1f}")
        pts.append(f"{x(end):.1f},{y(resident):.1f}")
        parts.append(f'<polygon points="{" ".join(pts)}" fill="{_ACTIVATION_COLOR}" stroke="#b36b00"/>')
        # the peak, with the tensors live there as a tooltip
        if m.peak_position is not None:
            px = x(m.peak_position)
            live = report.peak_tensors(m.ipu)
            tip = "\n".join(
                [f"op {m.peak_position}: {m.peak_at}"]
                + [f"{format_bytes(b.nbytes)}  {w.tensor if w else b.name} ({w.op if w else b.kind})" for b, w in live]
            )
            parts.append(
                f'<line x1="{px:.1f}" y1="{top:.1f}" x2="{px:.1f}" y2="{y(0):.1f}" stroke="{_PEAK_COLOR}" '
                f'stroke-dasharray="4,3" stroke-width="2"><title>{escape(tip)}</title></line>'
            )
            anchor = "end" if px > _LEFT + plot_w * 0.6 else "start"
            dx = -4 if anchor == "end" else 4
            label = f"peak {format_bytes(m.total)}: {m.peak_at}"
            if len(label) > 90:
                label = label[:87] + "..."
            parts.append(
                f'<text x="{px + dx:.1f}" y="{top + 12:.1f}" text-anchor="{anchor}" fill="{_PEAK_COLOR}">'
                f"{escape(label)}</text>"
            )
        # x axis
        parts.append(f'<line x1="{_LEFT}" y1="{y(0):.1f}" x2="{_LEFT + plot_w}" y2="{y(0):.1f}" stroke="black"/>')
        xt = _nice_step(end, 8)
        p = 0.0
        while p <= end + 1e-9:
            parts.append(f'<text x="{x(p):.1f}" y="{y(0) + 14:.1f}" text-anchor="middle">{p:g}</text>')
            p += xt
        parts.append(
            f'<text x="{_LEFT + plot_w / 2:.1f}" y="{y(0) + 30:.1f}" text-anchor="middle">'
            "op (schedule of the compiled program)</text>"
        )
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _write_png(report: MemoryReport, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(
            f"liveness picture {str(path)!r}: a PNG needs matplotlib (pip install 'xl-popxl[plot]'); "
            "an .svg needs nothing"
        ) from None
    from xl.runtime.memory import format_bytes

    n = len(report.ipus)
    fig, axes = plt.subplots(n, 1, figsize=(10, 2.6 * n), squeeze=False)
    for ax, m in zip(axes[:, 0], report.ipus, strict=True):
        steps, resident, end = _series(report, m.ipu)
        ymax = max(resident + max(b for _, b in steps), 1)
        scale, unit = _unit(ymax)
        xs = [p for p, _ in steps] + [end]
        ys = [(resident + b) / scale for _, b in steps] + [(resident + steps[-1][1]) / scale]
        ax.fill_between([0, end], 0, resident / scale, color=_RESIDENT_COLOR, label="variables, stashes, constants")
        ax.fill_between(xs, resident / scale, ys, step="post", color=_ACTIVATION_COLOR, label="live activations")
        if m.peak_position is not None:
            ax.axvline(m.peak_position, color=_PEAK_COLOR, linestyle="--")
            ax.annotate(
                f"peak {format_bytes(m.total)}", (m.peak_position, m.total / scale), color=_PEAK_COLOR, fontsize=8
            )
        ax.set_xlim(0, end)
        ax.set_ylim(0, ymax / scale * 1.1)
        ax.set_ylabel(unit)
        ax.set_title(f"IPU {m.ipu}", fontsize=10, loc="left")
    axes[-1, 0].set_xlabel("op (schedule of the compiled program)")
    reps = report.replication_factor
    fig.suptitle(f"Liveness per virtual IPU (bytes per replica; {reps} replica{'s' if reps != 1 else ''})")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="upper right", fontsize=8, ncol=2)
    fig.savefig(path, dpi=100)
    plt.close(fig)
