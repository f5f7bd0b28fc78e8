"""Classify prompt files through two running gateways and print how the cascade did on them.

    classify.py CASCADE_URL ENCODER_URL BAND_LOW BAND_HIGH NAME=FILE... > table.md

CASCADE_URL is a gateway with the cascade on and a fixed band (cascade.narrow_to 0, so the
concurrency of this script cannot narrow it); ENCODER_URL one with the cascade off, whose answer
is MiniLM's. Both get each text once, 8 per /v1/classify request. Standard library only.
"""
import json
import sys
import urllib.request


def classify(url, texts):
    out = []
    for i in range(0, len(texts), 8):
        body = json.dumps({"texts": texts[i:i + 8]}).encode()
        req = urllib.request.Request(url + "/v1/classify", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            out.extend(json.load(resp)["results"])
    return out


def main(argv):
    if len(argv) < 5:
        sys.exit(__doc__)
    casc_url, enc_url, lo, hi = argv[0], argv[1], float(argv[2]), float(argv[3])
    print(f"| prompts | texts | word pieces MiniLM read, mean | decided statically | agreement with MiniLM where "
          f"decided | cascade agrees with MiniLM | MiniLM itself outside [{lo}, {hi}] |")
    print("|---|---|---|---|---|---|---|")
    results = {}
    for arg in argv[4:]:
        name, path = arg.split("=", 1)
        with open(path) as f:
            texts = [json.loads(line) for line in f if line.strip()]
        casc, enc = classify(casc_url, texts), classify(enc_url, texts)
        assert all(r["cache"] == "miss" for r in casc + enc), f"{name}: a repeated text was a cache hit"
        assert all(r["stage"] == "encoder" for r in enc), "the second gateway must run with the cascade off"
        static = [c["stage"] == "static" for c in casc]
        agree = [c["model_label"] == e["model_label"] for c, e in zip(casc, enc)]
        dec = [a for a, s in zip(agree, static) if s]
        sure = [e["p_slow"] < lo or e["p_slow"] > hi for e in enc]
        pieces = sum(e["tokens"] for e in enc) / len(enc)
        row = {"texts": len(texts), "mean_pieces": pieces, "static_share": sum(static) / len(texts),
               "agreement_decided": (sum(dec) / len(dec)) if dec else None,
               "agreement": sum(agree) / len(agree), "minilm_outside_band": sum(sure) / len(sure),
               "minilm_slow_share": sum(e["model_label"] for e in enc) / len(enc)}
        results[name] = row
        ad = "—" if row["agreement_decided"] is None else f"{100 * row['agreement_decided']:.1f}% of {len(dec)}"
        print(f"| {name} | {len(texts)} | {pieces:.0f} | {100 * row['static_share']:.1f}% | {ad} | "
              f"{100 * row['agreement']:.1f}% | {100 * row['minilm_outside_band']:.1f}% |")
    with open("results.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
