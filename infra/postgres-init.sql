-- the MLflow backend store beside Prefect's database (compose.yaml)
CREATE DATABASE mlflow;
