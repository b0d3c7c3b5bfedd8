-- extend: renews the lease ($3 ms) of the rows $1 the claim $2 still
-- holds; the rows it no longer holds are the ones lost.
UPDATE {{table}}
SET locked_until = now() + $3 * interval '1 millisecond'
WHERE id = ANY($1)
  AND locked_by = $2
  AND status = 'processing'
