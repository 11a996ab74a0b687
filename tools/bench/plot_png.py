"""Latency-vs-size plots as PNG for tools/bench/model_bench.py: matplotlib when it is importable,
else a small pure-Python rasteriser (zlib + struct: lines, markers, axes, log ticks, a built-in
5x7 bitmap font, a legend), so the benchmark needs nothing beyond the standard library for it.

    write_plot(path, panels, systems, title, backend="auto") -> "matplotlib" | "builtin"

panels: [{"title": str, "xlabel": str, "ylabel": str, "series": {key: [(x, y), ...]}}], both
axes logarithmic; systems: [(key, label, (r, g, b), marker)] in legend order, marker one of
"o", "s", "^", "D", "v", "x".
"""

import math
import struct
import zlib

# 5x7 glyphs, rows top to bottom; lower-case letters are drawn as upper-case ones.
_FONT_ROWS = {
    "A": ".###. #...# #...# ##### #...# #...# #...#",
    "B": "####. #...# #...# ####. #...# #...# ####.",
    "C": ".###. #...# #.... #.... #.... #...# .###.",
    "D": "####. #...# #...# #...# #...# #...# ####.",
    "E": "##### #.... #.... ####. #.... #.... #####",
    "F": "##### #.... #.... ####. #.... #.... #....",
    "G": ".###. #...# #.... #.### #...# #...# .####",
    "H": "#...# #...# #...# ##### #...# #...# #...#",
    "I": ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.",
    "J": "..### ...#. ...#. ...#. ...#. #..#. .##..",
    "K": "#...# #..#. #.#.. ##... #.#.. #..#. #...#",
    "L": "#.... #.... #.... #.... #.... #.... #####",
    "M": "#...# ##.## #.#.# #.#.# #...# #...# #...#",
    "N": "#...# #...# ##..# #.#.# #..## #...# #...#",
    "O": ".###. #...# #...# #...# #...# #...# .###.",
    "P": "####. #...# #...# ####. #.... #.... #....",
    "Q": ".###. #...# #...# #...# #.#.# #..#. .##.#",
    "R": "####. #...# #...# ####. #.#.. #..#. #...#",
    "S": ".#### #.... #.... .###. ....# ....# ####.",
    "T": "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
    "U": "#...# #...# #...# #...# #...# #...# .###.",
    "V": "#...# #...# #...# #...# #...# .#.#. ..#..",
    "W": "#...# #...# #...# #.#.# #.#.# #.#.# .#.#.",
    "X": "#...# #...# .#.#. ..#.. .#.#. #...# #...#",
    "Y": "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#..",
    "Z": "##### ....# ...#. ..#.. .#... #.... #####",
    "0": ".###. #...# #..## #.#.# ##..# #...# .###.",
    "1": "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.",
    "2": ".###. #...# ....# ...#. ..#.. .#... #####",
    "3": "####. ....# ....# .###. ....# ....# ####.",
    "4": "...#. ..##. .#.#. #..#. ##### ...#. ...#.",
    "5": "##### #.... ####. ....# ....# #...# .###.",
    "6": "..##. .#... #.... ####. #...# #...# .###.",
    "7": "##### ....# ...#. ..#.. .#... .#... .#...",
    "8": ".###. #...# #...# .###. #...# #...# .###.",
    "9": ".###. #...# #...# .#### ....# ...#. .##..",
    ".": "..... ..... ..... ..... ..... .##.. .##..",
    ",": "..... ..... ..... ..... .##.. ..#.. .#...",
    "-": "..... ..... ..... .###. ..... ..... .....",
    "_": "..... ..... ..... ..... ..... ..... #####",
    "/": "....# ....# ...#. ..#.. .#... #.... #....",
    "(": "...#. ..#.. .#... .#... .#... ..#.. ...#.",
    ")": ".#... ..#.. ...#. ...#. ...#. ..#.. .#...",
    "[": ".###. .#... .#... .#... .#... .#... .###.",
    "]": ".###. ...#. ...#. ...#. ...#. ...#. .###.",
    ":": "..... .##.. .##.. ..... .##.. .##.. .....",
    "=": "..... ..... ##### ..... ##### ..... .....",
    "+": "..... ..#.. ..#.. ##### ..#.. ..#.. .....",
    "%": "##... ##..# ...#. ..#.. .#... #..## ...##",
    "*": "..... ..#.. #.#.# .###. #.#.# ..#.. .....",
    "<": "...#. ..#.. .#... #.... .#... ..#.. ...#.",
    ">": ".#... ..#.. ...#. ....# ...#. ..#.. .#...",
    "?": ".###. #...# ....# ...#. ..#.. ..... ..#..",
    "'": "..#.. ..#.. ..... ..... ..... ..... .....",
    "|": "..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
    " ": "..... ..... ..... ..... ..... ..... .....",
}
FONT = {ch: [row for row in rows.split()] for ch, rows in _FONT_ROWS.items()}
GLYPH_W, GLYPH_H, GLYPH_ADVANCE = 5, 7, 6


class Canvas:
    """An RGB image with the few drawing operations a line plot needs."""

    def __init__(self, width, height, background=(255, 255, 255)):
        self.w, self.h = int(width), int(height)
        self.px = bytearray(bytes(background) * (self.w * self.h))

    def set(self, x, y, color):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(color)

    def fill_rect(self, x0, y0, x1, y1, color):
        x0, x1 = sorted((int(round(x0)), int(round(x1))))
        y0, y1 = sorted((int(round(y0)), int(round(y1))))
        x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, self.w - 1), min(y1, self.h - 1)
        if x0 > x1 or y0 > y1:
            return
        row = bytes(color) * (x1 - x0 + 1)
        for y in range(y0, y1 + 1):
            i = (y * self.w + x0) * 3
            self.px[i:i + len(row)] = row

    def rect(self, x0, y0, x1, y1, color, width=1):
        for k in range(width):
            self.fill_rect(x0 + k, y0 + k, x1 - k, y0 + k, color)
            self.fill_rect(x0 + k, y1 - k, x1 - k, y1 - k, color)
            self.fill_rect(x0 + k, y0 + k, x0 + k, y1 - k, color)
            self.fill_rect(x1 - k, y0 + k, x1 - k, y1 - k, color)

    def line(self, x0, y0, x1, y1, color, width=1, dash=None):
        """A line of `width` pixels (a square brush along Bresenham's path); dash=(on, off)."""
        x0, y0, x1, y1 = (int(round(v)) for v in (x0, y0, x1, y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        lo, hi = -((width - 1) // 2), width // 2
        step = 0
        while True:
            if dash is None or step % (dash[0] + dash[1]) < dash[0]:
                if width == 1:
                    self.set(x0, y0, color)
                else:
                    self.fill_rect(x0 + lo, y0 + lo, x0 + hi, y0 + hi, color)
            if x0 == x1 and y0 == y1:
                return
            step += 1
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def marker(self, x, y, shape, color, r=5):
        x, y = int(round(x)), int(round(y))
        if shape == "s":
            self.fill_rect(x - r + 1, y - r + 1, x + r - 1, y + r - 1, color)
        elif shape in ("^", "v"):
            for k in range(2 * r):
                half = k // 2
                yy = y - r + k if shape == "^" else y + r - k
                self.fill_rect(x - half, yy, x + half, yy, color)
        elif shape == "D":
            for k in range(-r, r + 1):
                half = r - abs(k)
                self.fill_rect(x - half, y + k, x + half, y + k, color)
        elif shape == "x":
            self.line(x - r, y - r, x + r, y + r, color, 2)
            self.line(x - r, y + r, x + r, y - r, color, 2)
        else:  # "o"
            for k in range(-r, r + 1):
                half = int(math.sqrt(max(0, r * r - k * k)))
                self.fill_rect(x - half, y + k, x + half, y + k, color)

    def text_width(self, s, scale=2):
        return max(0, len(s) * GLYPH_ADVANCE * scale - scale)

    def text(self, x, y, s, color=(0, 0, 0), scale=2, align="left", valign="top",
             vertical=False):
        """Text at (x, y); vertical: rotated 90 degrees counter-clockwise (reads bottom-up)."""
        w, h = self.text_width(s, scale), GLYPH_H * scale
        if vertical:
            # Along y (upwards): align refers to the y axis, valign to x.
            y0 = {"left": y, "center": y + w / 2, "right": y + w}[align]
            x0 = {"top": x, "middle": x - h / 2, "bottom": x - h}[valign]
        else:
            x0 = {"left": x, "center": x - w / 2, "right": x - w}[align]
            y0 = {"top": y, "middle": y - h / 2, "bottom": y - h}[valign]
        x0, y0 = int(round(x0)), int(round(y0))
        for n, ch in enumerate(s):
            glyph = FONT.get(ch.upper(), FONT["?"])
            for r, row in enumerate(glyph):
                for c, bit in enumerate(row):
                    if bit != "#":
                        continue
                    u, v = n * GLYPH_ADVANCE * scale + c * scale, r * scale
                    if vertical:
                        self.fill_rect(x0 + v, y0 - u - scale + 1, x0 + v + scale - 1, y0 - u,
                                       color)
                    else:
                        self.fill_rect(x0 + u, y0 + v, x0 + u + scale - 1, y0 + v + scale - 1,
                                       color)

    def png(self):
        raw = bytearray()
        stride = self.w * 3
        for y in range(self.h):
            raw.append(0)  # filter: none
            raw += self.px[y * stride:(y + 1) * stride]

        def chunk(kind, data):
            c = struct.pack(">I", len(data)) + kind + data
            return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        return (b"\x89PNG\r\n\x1a\n"
                + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b""))


def _fmt_tick(v):
    if v >= 1e5 or v < 0.001:
        e = int(round(math.log10(v)))
        return f"1E{e}" if abs(v - 10 ** e) < 1e-9 * v else f"{v:.0e}".upper()
    if v >= 1:
        return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:g}"
    return f"{v:g}"


def _log_ticks(lo, hi):
    """Tick values for a log axis over [lo, hi]: decades, plus 2 and 5 when under two decades."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mults = (1, 2, 5) if b - a <= 2 else (1,)
    out = [m * 10 ** e for e in range(a, b + 1) for m in mults]
    return [v for v in out if lo * 0.999 <= v <= hi * 1.001]


def _builtin(path, panels, systems, title):
    n = max(1, len(panels))
    pw, ph = 470, 400  # one panel's plot area
    left, right, top, gap = 90, 20, 84, 96
    legend_rows = (len(systems) + 2) // 3
    width = left + n * pw + (n - 1) * gap + right
    height = top + ph + 70 + 30 * legend_rows + 20
    cv = Canvas(width, height)
    black, grid, axis_gray = (0, 0, 0), (225, 225, 225), (90, 90, 90)
    if title:
        cv.text(width / 2, 12, title, black, scale=2, align="center")
    for k, panel in enumerate(panels):
        x0 = left + k * (pw + gap)
        y0, x1, y1 = top, x0 + pw, top + ph
        pts = [(x, y) for s in panel["series"].values() for x, y in s if x > 0 and y and y > 0]
        cv.text((x0 + x1) / 2, top - 30, panel.get("title", ""), black, scale=2, align="center")
        cv.rect(x0, y0, x1, y1, axis_gray)
        if not pts:
            cv.text((x0 + x1) / 2, (y0 + y1) / 2, "no data", axis_gray, align="center",
                    valign="middle")
            continue
        xs = sorted({x for x, _ in pts})
        ylo, yhi = min(y for _, y in pts), max(y for _, y in pts)
        ylo, yhi = 10 ** math.floor(math.log10(ylo) - 0.05), 10 ** math.ceil(
            math.log10(yhi) + 0.05)
        xlo, xhi = xs[0] / 1.6, xs[-1] * 1.6
        if xlo == xhi:
            xlo, xhi = xlo / 2, xhi * 2

        def px(x):
            return x0 + (math.log(x) - math.log(xlo)) / (math.log(xhi) - math.log(xlo)) * pw

        def py(y):
            return y1 - (math.log(y) - math.log(ylo)) / (math.log(yhi) - math.log(ylo)) * ph

        for v in _log_ticks(ylo, yhi):
            cv.line(x0 + 1, py(v), x1 - 1, py(v), grid, dash=(4, 4))
            cv.line(x0 - 6, py(v), x0, py(v), axis_gray)
            cv.text(x0 - 10, py(v), _fmt_tick(v), black, scale=2, align="right", valign="middle")
        for v in xs:
            cv.line(px(v), y0 + 1, px(v), y1 - 1, grid, dash=(4, 4))
            cv.line(px(v), y1, px(v), y1 + 6, axis_gray)
            cv.text(px(v), y1 + 12, _fmt_tick(v), black, scale=2, align="center")
        cv.text((x0 + x1) / 2, y1 + 40, panel.get("xlabel", ""), black, scale=2, align="center")
        cv.text(x0 - 70, (y0 + y1) / 2, panel.get("ylabel", ""), black, scale=2,
                align="center", valign="top", vertical=True)
        for key, _, color, marker in systems:
            s = sorted((x, y) for x, y in panel["series"].get(key, []) if x > 0 and y and y > 0)
            for (xa, ya), (xb, yb) in zip(s, s[1:]):
                cv.line(px(xa), py(ya), px(xb), py(yb), color, width=3)
            for x, y in s:
                cv.marker(px(x), py(y), marker, color)
        cv.rect(x0, y0, x1, y1, axis_gray)
    ly = top + ph + 75
    col_w = (width - left - right) / 3
    for i, (_, label, color, marker) in enumerate(systems):
        cx = left + (i % 3) * col_w
        cy = ly + (i // 3) * 30
        cv.line(cx, cy, cx + 40, cy, color, width=3)
        cv.marker(cx + 20, cy, marker, color)
        cv.text(cx + 52, cy, label, black, scale=2, valign="middle")
    with open(path, "wb") as f:
        f.write(cv.png())


def _matplotlib(path, panels, systems, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 4.6), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for key, label, color, marker in systems:
            s = sorted((x, y) for x, y in panel["series"].get(key, []) if x > 0 and y and y > 0)
            if s:
                ax.plot([x for x, _ in s], [y for _, y in s], marker=marker, label=label,
                        color=tuple(c / 255 for c in color), linewidth=1.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        xs = sorted({x for s in panel["series"].values() for x, _ in s if x > 0})
        if xs:
            ax.set_xticks(xs)
            ax.set_xticklabels([str(x) for x in xs])
            ax.minorticks_off()
        ax.set_title(panel.get("title", ""))
        ax.set_xlabel(panel.get("xlabel", ""))
        ax.set_ylabel(panel.get("ylabel", ""))
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = [], []
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(handles)))
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.12, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plot(path, panels, systems, title=None, backend="auto"):
    """Writes the PNG; returns the backend used ("matplotlib" or "builtin")."""
    if backend in ("auto", "matplotlib"):
        try:
            import matplotlib  # noqa: F401
            _matplotlib(path, panels, systems, title)
            return "matplotlib"
        except ImportError:
            if backend == "matplotlib":
                raise
    _builtin(path, panels, systems, title)
    return "builtin"
