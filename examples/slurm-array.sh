#!/bin/sh
# One job file, four array tasks, each running one shard of it (README: "Recipes").
#
#   cd /shared/summaries && sbatch slurm-array.sh     # jobs.jsonl is in this directory
#
# Slurm gives every task its id (0..3 here) and the array's size; the runner takes the jobs
# whose id hashes to that task (--shard ID/COUNT) and appends each answer to the task's own
# results file as soon as it is in. To finish what failed, submit the whole array again: each
# task resumes its own shard and runs only what is missing (a task submitted alone would see
# another SLURM_ARRAY_TASK_COUNT, so always submit all of them). --model names the primary and
# --models where failover may go, in that order (README: "Set up providers"). The keys
# models.json refers to must be in the environment sbatch passes on (it passes the submitting
# shell's by default).
#
#SBATCH --job-name=summaries
#SBATCH --array=0-3
#SBATCH --cpus-per-task=2
#SBATCH --time=02:00:00
#SBATCH --output=summaries-%A_%a.log
set -eu
mkdir -p results
exec pi-ccswitch-run --batch jobs.jsonl --jobs "${SLURM_CPUS_PER_TASK:-2}" --no-tools \
  --model zhipu/glm-4.6 --models 'zhipu/*,dashscope/*,deepseek-cn/*' \
  --shard "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT" \
  --output "results/shard-$SLURM_ARRAY_TASK_ID.jsonl" --resume
