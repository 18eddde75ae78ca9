"""(family being written)"""

RECORDS: list = []
