-- wrk script: POST one fixed text to /v1/classify, so every request after the
-- first is a cache hit. Used by bench/wrk/run.sh.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"text":"Classify each of these as a fruit or a vegetable: apple, carrot, banana, leek."}'
