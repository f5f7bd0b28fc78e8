-- wrk script: the same POST against the bare net/http baseline (triage-bench hello).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"text":"Classify each of these as a fruit or a vegetable: apple, carrot, banana, leek."}'
