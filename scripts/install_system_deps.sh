#!/usr/bin/env bash
# System packages the tests need: headless Chromium (browser tests of the HTML report),
# jq (the `dslogs session | jq` test) and a Java runtime for pyspark. Idempotent.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v jq >/dev/null 2>&1 || need+=(jq)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${need[@]}"
fi
