"""Reference solutions of the built-in problems, and plausible wrong ones (not shipped).

``SOLUTIONS[id]`` must pass every test of problem ``id``; ``WRONG[id]`` is a
believable bug (mostly an edge case the visible examples do not show) that a
hidden test must catch. Both are source text: they run in the sandbox.
"""

from __future__ import annotations

__all__ = ["SOLUTIONS", "WRONG"]

SOLUTIONS: dict[str, str] = {
    "reverse_words": """
def reverse_words(s):
    return " ".join(reversed(s.split()))
""",
    "is_palindrome": """
def is_palindrome(s):
    kept = [c.lower() for c in s if c.isalnum()]
    return kept == kept[::-1]
""",
    "count_vowels": """
def count_vowels(s):
    return sum(c in "aeiouAEIOU" for c in s)
""",
    "caesar_shift": """
def caesar_shift(s, k):
    out = []
    for c in s:
        if "a" <= c <= "z":
            out.append(chr((ord(c) - 97 + k) % 26 + 97))
        elif "A" <= c <= "Z":
            out.append(chr((ord(c) - 65 + k) % 26 + 65))
        else:
            out.append(c)
    return "".join(out)
""",
    "run_length_encode": """
from itertools import groupby

def run_length_encode(s):
    return "".join(f"{char}{len(list(run))}" for char, run in groupby(s))
""",
    "longest_common_prefix": """
import os

def longest_common_prefix(words):
    return os.path.commonprefix(words) if words else ""
""",
    "is_anagram": """
from collections import Counter

def is_anagram(a, b):
    clean = lambda s: Counter(s.lower().replace(" ", ""))
    return clean(a) == clean(b)
""",
    "first_unique_char": """
from collections import Counter

def first_unique_char(s):
    counts = Counter(s)
    return next((i for i, c in enumerate(s) if counts[c] == 1), -1)
""",
    "to_snake_case": """
def to_snake_case(name):
    out = []
    for i, c in enumerate(name):
        if c.isupper() and i > 0 and (name[i - 1].islower() or name[i - 1].isdigit()):
            out.append("_")
        out.append(c)
    return "".join(out).lower()
""",
    "valid_brackets": """
def valid_brackets(s):
    pairs = {")": "(", "]": "[", "}": "{"}
    stack = []
    for c in s:
        if c in "([{":
            stack.append(c)
        elif c in pairs:
            if not stack or stack.pop() != pairs[c]:
                return False
    return not stack
""",
    "word_frequencies": """
import re
from collections import Counter

def word_frequencies(text):
    return dict(Counter(w.lower() for w in re.findall(r"[A-Za-z]+", text)))
""",
    "second_largest": """
def second_largest(nums):
    values = sorted(set(nums))
    return values[-2] if len(values) >= 2 else None
""",
    "rotate_right": """
def rotate_right(items, k):
    if not items:
        return []
    k %= len(items)
    return items[-k:] + items[:-k] if k else list(items)
""",
    "flatten": """
def flatten(nested):
    out = []
    for item in nested:
        if isinstance(item, list):
            out.extend(flatten(item))
        else:
            out.append(item)
    return out
""",
    "chunk": """
def chunk(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]
""",
    "max_subarray_sum": """
def max_subarray_sum(nums):
    best = current = nums[0]
    for x in nums[1:]:
        current = max(x, current + x)
        best = max(best, current)
    return best
""",
    "two_sum": """
def two_sum(nums, target):
    seen = {}
    for j, x in enumerate(nums):
        if target - x in seen:
            return [seen[target - x], j]
        seen.setdefault(x, j)
""",
    "merge_intervals": """
def merge_intervals(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged
""",
    "dedupe": """
def dedupe(items):
    return list(dict.fromkeys(items))
""",
    "moving_average": """
def moving_average(nums, k):
    return [sum(nums[i:i + k]) / k for i in range(len(nums) - k + 1)]
""",
    "spiral_order": """
def spiral_order(matrix):
    out = []
    rows = [list(row) for row in matrix]
    while rows:
        out += rows.pop(0)
        rows = [list(row) for row in zip(*rows)][::-1]
    return out
""",
    "is_prime": """
def is_prime(n):
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True
""",
    "gcd_of_list": """
from math import gcd
from functools import reduce

def gcd_of_list(nums):
    return reduce(gcd, nums, 0)
""",
    "digit_sum": """
def digit_sum(n):
    return sum(int(d) for d in str(abs(n)))
""",
    "fizzbuzz": """
def fizzbuzz(n):
    out = []
    for i in range(1, n + 1):
        out.append("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0
                   else "Buzz" if i % 5 == 0 else str(i))
    return out
""",
    "to_roman": """
def to_roman(n):
    table = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
             (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = ""
    for value, letters in table:
        while n >= value:
            out += letters
            n -= value
    return out
""",
    "to_base": """
def to_base(n, base):
    if n == 0:
        return "0"
    digits = "0123456789abcdef"
    sign, n = ("-" if n < 0 else ""), abs(n)
    out = ""
    while n:
        n, r = divmod(n, base)
        out = digits[r] + out
    return sign + out
""",
    "fibonacci": """
def fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
""",
    "collatz_steps": """
def collatz_steps(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps
""",
    "group_anagrams": """
def group_anagrams(words):
    groups = {}
    for word in words:
        groups.setdefault("".join(sorted(word)), []).append(word)
    return list(groups.values())
""",
    "invert_dict": """
def invert_dict(d):
    out = {}
    for key, value in d.items():
        out.setdefault(value, []).append(key)
    return {value: sorted(keys) for value, keys in out.items()}
""",
    "merge_counts": """
def merge_counts(a, b):
    out = dict(a)
    for key, value in b.items():
        out[key] = out.get(key, 0) + value
    return {key: value for key, value in out.items() if value != 0}
""",
    "top_k_frequent": """
from collections import Counter

def top_k_frequent(words, k):
    counts = Counter(words)
    return sorted(counts, key=lambda w: (-counts[w], w))[:k]
""",
    "binary_search": """
import bisect

def binary_search(nums, target):
    i = bisect.bisect_left(nums, target)
    return i if i < len(nums) and nums[i] == target else -1
""",
    "count_islands": """
def count_islands(grid):
    seen = set()
    count = 0
    for r, row in enumerate(grid):
        for c, cell in enumerate(row):
            if cell != "#" or (r, c) in seen:
                continue
            count += 1
            stack = [(r, c)]
            seen.add((r, c))
            while stack:
                y, x = stack.pop()
                for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                    if (0 <= ny < len(grid) and 0 <= nx < len(grid[ny])
                            and grid[ny][nx] == "#" and (ny, nx) not in seen):
                        seen.add((ny, nx))
                        stack.append((ny, nx))
    return count
""",
    "min_coins": """
def min_coins(coins, amount):
    best = [0] + [None] * amount
    for total in range(1, amount + 1):
        options = [best[total - c] for c in coins if c <= total and best[total - c] is not None]
        best[total] = min(options) + 1 if options else None
    return -1 if best[amount] is None else best[amount]
""",
    "longest_increasing_run": """
import bisect

def longest_increasing_run(nums):
    tails = []
    for x in nums:
        i = bisect.bisect_left(tails, x)
        tails[i:i + 1] = [x]
    return len(tails)
""",
    "edit_distance": """
def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]
""",
    "sum_pairs": """
import sys

data = sys.stdin.read().split()
n = int(data[0])
for i in range(n):
    print(int(data[1 + 2 * i]) + int(data[2 + 2 * i]))
""",
    "line_stats": """
import sys

text = sys.stdin.read()
lines = text.count("\\n") + (1 if text and not text.endswith("\\n") else 0)
print(lines, len(text.split()))
""",
    "running_max": """
n = int(input())
values = list(map(int, input().split()))
out, best = [], None
for v in values:
    best = v if best is None else max(best, v)
    out.append(best)
print(*out)
""",
    "shortest_path_grid": """
from collections import deque

rows, cols = map(int, input().split())
grid = [input() for _ in range(rows)]
start = next((r, c) for r in range(rows) for c in range(cols) if grid[r][c] == "S")
dist = {start: 0}
queue = deque([start])
answer = -1
while queue:
    r, c = queue.popleft()
    if grid[r][c] == "E":
        answer = dist[(r, c)]
        break
    for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
        if 0 <= nr < rows and 0 <= nc < cols and grid[nr][nc] != "#" and (nr, nc) not in dist:
            dist[(nr, nc)] = dist[(r, c)] + 1
            queue.append((nr, nc))
print(answer)
""",
}

# Each is wrong on at least one hidden test.
WRONG: dict[str, str] = {
    "reverse_words": "def reverse_words(s):\n    return ' '.join(reversed(s.split(' ')))",
    "is_palindrome": "def is_palindrome(s):\n    t = ''.join(c for c in s if c.isalpha()).lower()\n"
                     "    return t == t[::-1]",
    "count_vowels": "def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)",
    "caesar_shift": "def caesar_shift(s, k):\n    return ''.join(chr((ord(c) - 97 + k) % 26 + 97)"
                    " if c.isalpha() else c for c in s.lower())",
    "run_length_encode": "def run_length_encode(s):\n    from collections import Counter\n"
                         "    return ''.join(f'{c}{n}' for c, n in Counter(s).items())",
    "longest_common_prefix": "def longest_common_prefix(words):\n    first = words[0]\n"
                             "    i = 0\n    while all(w[i:i+1] == first[i:i+1] for w in words) and"
                             " i < len(first):\n        i += 1\n    return first[:i]",
    "is_anagram": "def is_anagram(a, b):\n    return sorted(a.lower()) == sorted(b.lower())",
    "first_unique_char": "def first_unique_char(s):\n    for i, c in enumerate(s):\n"
                         "        if s.count(c) == 1:\n            return i\n    return 0",
    "to_snake_case": "def to_snake_case(name):\n    return ''.join('_' + c.lower() if c.isupper()"
                     " else c for c in name).lstrip('_')",
    "valid_brackets": "def valid_brackets(s):\n    return all(s.count(a) == s.count(b) for a, b in"
                      " ('()', '[]', '{}'))",
    "word_frequencies": "def word_frequencies(text):\n    out = {}\n    for w in text.lower().split():\n"
                        "        out[w] = out.get(w, 0) + 1\n    return out",
    "second_largest": "def second_largest(nums):\n    s = sorted(nums)\n"
                      "    return s[-2] if len(s) > 1 and s[-2] != s[-1] else None",
    "rotate_right": "def rotate_right(items, k):\n    return items[-k:] + items[:-k]",
    "flatten": "def flatten(nested):\n    out = []\n    for x in nested:\n"
               "        out.extend(x if isinstance(x, list) else [x])\n    return out",
    "chunk": "def chunk(items, size):\n    return [items[i:i + size] for i in range(0, len(items),"
             " size) if len(items[i:i + size]) == size] or [items]",
    "max_subarray_sum": "def max_subarray_sum(nums):\n    best = cur = 0\n    for x in nums:\n"
                        "        cur = max(0, cur + x)\n        best = max(best, cur)\n    return best",
    "two_sum": "def two_sum(nums, target):\n    for i in range(len(nums)):\n"
               "        for j in range(i + 1, len(nums)):\n"
               "            if nums[i] + nums[j] == target and nums[i] != nums[j]:\n"
               "                return [i, j]",
    "merge_intervals": "def merge_intervals(intervals):\n    out = []\n    for s, e in intervals:\n"
                       "        if out and s < out[-1][1]:\n            out[-1][1] = max(out[-1][1], e)\n"
                       "        else:\n            out.append([s, e])\n    return out",
    "dedupe": "def dedupe(items):\n    out = []\n    for x in items:\n"
              "        if not out or out[-1] != x:\n            out.append(x)\n    return out",
    "moving_average": "def moving_average(nums, k):\n    return [sum(nums[i:i + k]) / k for i in"
                      " range(len(nums) - 1)]",
    "spiral_order": "def spiral_order(matrix):\n    if len(matrix) == 2:\n"
                    "        return matrix[0] + matrix[1][::-1]\n"
                    "    return [1, 2, 3, 6, 9, 8, 7, 4, 5]",
    "is_prime": "def is_prime(n):\n    return n > 1 and all(n % i for i in range(2, min(n, 50)))",
    "gcd_of_list": "from math import gcd\ndef gcd_of_list(nums):\n    g = nums[0]\n"
                   "    for x in nums:\n        g = gcd(g, x)\n    return g",
    "digit_sum": "def digit_sum(n):\n    return sum(int(d) for d in str(n) if d != '-') if n > 0 else 9",
    "fizzbuzz": "def fizzbuzz(n):\n    return ['Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else"
                " str(i) for i in range(1, n + 1)]",
    "to_roman": "def to_roman(n):\n    out = ''\n    for v, s in ((1000, 'M'), (500, 'D'), (100, 'C'),"
                " (50, 'L'), (10, 'X'), (5, 'V'), (1, 'I')):\n        out += s * (n // v)\n"
                "        n %= v\n    return out",
    "to_base": "def to_base(n, base):\n    out = ''\n    while n > 0:\n"
               "        n, r = divmod(n, base)\n        out = '0123456789abcdef'[r] + out\n    return out",
    "fibonacci": "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "collatz_steps": "def collatz_steps(n):\n    steps = 0\n    while n > 2:\n"
                     "        n = n // 2 if n % 2 == 0 else 3 * n + 1\n        steps += 1\n    return steps",
    "group_anagrams": "def group_anagrams(words):\n    groups = {}\n    for w in words:\n"
                      "        groups.setdefault(''.join(sorted(w.lower())), []).append(w)\n"
                      "    return sorted(groups.values(), key=len, reverse=True)",
    "invert_dict": "def invert_dict(d):\n    out = {}\n    for k, v in d.items():\n"
                   "        out.setdefault(v, []).append(k)\n    return out",
    "merge_counts": "def merge_counts(a, b):\n    out = dict(a)\n    for k, v in b.items():\n"
                    "        out[k] = out.get(k, 0) + v\n    return out",
    "top_k_frequent": "from collections import Counter\ndef top_k_frequent(words, k):\n"
                      "    return [w for w, _ in Counter(words).most_common(k)]",
    "binary_search": "def binary_search(nums, target):\n    lo, hi = 0, len(nums) - 1\n"
                     "    while lo < hi:\n        mid = (lo + hi) // 2\n"
                     "        if nums[mid] < target:\n            lo = mid + 1\n"
                     "        else:\n            hi = mid\n"
                     "    return lo if nums and nums[lo] == target and lo != len(nums) - 1 else -1",
    "count_islands": "def count_islands(grid):\n    return sum(row.count('#') > 0 for row in grid) // 1"
                     " if len(grid) != 3 or grid[0] != '##..' else 2",
    "min_coins": "def min_coins(coins, amount):\n    n = 0\n    for c in sorted(coins, reverse=True):\n"
                 "        n += amount // c\n        amount %= c\n    return n if amount == 0 else -1",
    "longest_increasing_run": "def longest_increasing_run(nums):\n    best = cur = 1\n"
                              "    for a, b in zip(nums, nums[1:]):\n        cur = cur + 1 if b > a else 1\n"
                              "        best = max(best, cur)\n    return best if nums else 0",
    "edit_distance": "def edit_distance(a, b):\n    return max(len(a), len(b)) - sum(x == y for x, y in"
                     " zip(a, b))",
    "sum_pairs": "n = int(input())\nfor _ in range(n):\n    a, b = input().split(' ')\n"
                 "    print(int(a) + int(b))",
    "line_stats": "import sys\ntext = sys.stdin.read()\nprint(text.count('\\n'), len(text.split()))",
    "running_max": "n = int(input())\nv = list(map(int, input().split()))\n"
                   "print(*[max(v[:i + 1]) if v[i] > 0 else v[i] for i in range(n)])",
    "shortest_path_grid": "r, c = map(int, input().split())\ng = [input() for _ in range(r)]\n"
                          "s = next((i, j) for i in range(r) for j in range(c) if g[i][j] == 'S')\n"
                          "e = next((i, j) for i in range(r) for j in range(c) if g[i][j] == 'E')\n"
                          "print(abs(s[0] - e[0]) + abs(s[1] - e[1]) if '#' not in ''.join(g[1:]) or"
                          " r < 3 else -1 if r == 2 else abs(s[0] - e[0]) + abs(s[1] - e[1]))",
}
