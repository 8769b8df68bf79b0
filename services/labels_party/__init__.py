"""The advertiser side: label sets, uploads, releases, the budget ledger and the outbox sender."""
